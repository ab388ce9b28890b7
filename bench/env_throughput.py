"""Raw environment throughput: the ceiling a training loop can approach.

For each task, backend and number of environments, a jitted `lax.scan` steps strl_jax's batched
env (Brax tasks, or MuJoCo Playground tasks such as Go1JoystickFlatTerrain with their domain
randomisation; fresh-random auto-reset included) with uniform random actions in
[-1, 1]; no policy, no learning. Compilation (lower + compile of the scan) is timed apart from
the steady-state steps/s, which is measured over repeated calls of the compiled scan for at
least `--min-time` seconds after one warm-up call.

    python bench/env_throughput.py --tasks inverted_pendulum,hopper,ant \
        --num-envs 256,512,1024,2048,4096,8192,16384 --json /tmp/env_throughput.json

`--hfield-contacts mjx,mujoco` measures a Playground rough-terrain task under each heightfield
contact rule (`env.hfield_contacts`), one after the other in the same invocation.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from typing import Any

from common import device_info, format_table, machine_info, write_json

import strl_jax  # noqa: F401  (its XLA:CPU defaults, before jax starts a backend)

DEFAULT_TASKS = "inverted_pendulum,hopper,ant"
DEFAULT_NUM_ENVS = "256,512,1024,2048,4096,8192,16384"


def preset_backend(task: str) -> str:
    """The backend of the task's strl_jax preset (positional for tasks without one; `playground`
    for MuJoCo Playground tasks, which run MJX's JAX implementation)."""
    from strl_jax.configs.loader import available_presets, load_preset
    from strl_jax.envs import task_family

    if task_family(task) == "playground":
        return "playground"
    if task in available_presets():
        return load_preset(task).get("env", {}).get("backend", "positional")
    return "positional"


def scan_length(num_envs: int, steps_per_call: int, fixed: int | None) -> int:
    """Steps per env in one compiled call: about `steps_per_call` env steps, 1..1000."""
    if fixed:
        return fixed
    return max(1, min(1000, round(steps_per_call / num_envs)))


def measure(
    task: str,
    backend: str,
    num_envs: int,
    length: int,
    min_time: float,
    episode_length: int,
    seed: int,
    contacts: str = "mjx",
) -> dict[str, Any]:
    """Compile time and steady-state env steps/s of one configuration."""
    import jax

    from strl_jax.envs import make_brax_env
    from strl_jax.envs.playground_env import make_playground_env

    if backend == "playground":
        env = make_playground_env(task, num_envs, episode_length, hfield_contacts=contacts)
    else:
        env = make_brax_env(task, backend, num_envs, episode_length)
    action_size = env.action_size

    def run(state, key):
        def body(carry, _):
            state, key = carry
            key, sub = jax.random.split(key)
            actions = jax.random.uniform(sub, (num_envs, action_size), minval=-1.0, maxval=1.0)
            state, result = env.step(state, actions)
            return (state, key), result.reward.sum()

        (state, key), rewards = jax.lax.scan(body, (state, key), None, length=length)
        return state, key, rewards.sum()

    key = jax.random.PRNGKey(seed)
    key, reset_key = jax.random.split(key)
    start = time.perf_counter()
    reset = jax.jit(env.reset)
    state, _ = jax.block_until_ready(reset(reset_key))
    reset_s = time.perf_counter() - start

    start = time.perf_counter()
    compiled = jax.jit(run, donate_argnums=(0,)).lower(state, key).compile()
    compile_s = time.perf_counter() - start

    start = time.perf_counter()
    state, key, total = jax.block_until_ready(compiled(state, key))
    first_call_s = time.perf_counter() - start

    calls = 0
    start = time.perf_counter()
    elapsed = 0.0
    while calls < 2 or elapsed < min_time:
        state, key, total = compiled(state, key)
        jax.block_until_ready(total)
        calls += 1
        elapsed = time.perf_counter() - start
    steps = calls * length * num_envs
    return {
        "task": task,
        "backend": backend,
        "hfield_contacts": contacts,
        "num_envs": num_envs,
        "scan_length": length,
        "reset_s": reset_s,
        "compile_s": compile_s,
        "first_call_s": first_call_s,
        "calls": calls,
        "steps": steps,
        "measure_s": elapsed,
        "steps_per_s": steps / elapsed,
        "us_per_env_step": elapsed / steps * 1e6,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=DEFAULT_TASKS, help="comma-separated Brax or Playground tasks")
    p.add_argument(
        "--backends",
        default="preset",
        help="comma-separated backends (mjx, generalized, positional, spring), or 'preset' for each "
        "task's strl_jax preset backend",
    )
    p.add_argument("--num-envs", default=DEFAULT_NUM_ENVS, help="comma-separated env counts")
    p.add_argument(
        "--steps-per-call",
        type=int,
        default=65536,
        help="env steps per compiled call (scan length = this / num_envs, 1..1000)",
    )
    p.add_argument("--scan-length", type=int, default=None, help="fixed scan length (overrides the above)")
    p.add_argument("--min-time", type=float, default=5.0, help="seconds of steady-state measurement")
    p.add_argument("--episode-length", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--hfield-contacts", default="mjx", help="comma-separated rules for Playground tasks (mjx, mujoco)"
    )
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import jax

    tasks = [t for t in args.tasks.split(",") if t]
    num_envs_list = [int(n) for n in args.num_envs.split(",") if n]
    info = {"machine": machine_info(), "device": device_info()}
    print(
        f"machine: {info['machine']['cpu_model']}, {info['machine']['cpu_count']} CPUs; "
        f"jax {info['device']['jax']} on {info['device']['backend']} ({info['device']['device_kind']})"
    )
    results: list[dict[str, Any]] = []
    for task in tasks:
        backends = [preset_backend(task)] if args.backends == "preset" else args.backends.split(",")
        for backend in backends:
            rules = args.hfield_contacts.split(",") if backend == "playground" else ["mjx"]
            for num_envs in num_envs_list:
                for rule in rules:
                    length = scan_length(num_envs, args.steps_per_call, args.scan_length)
                    label = f"{task}/{backend}" + (f" ({rule} contacts)" if len(rules) > 1 else "")
                    try:
                        r = measure(
                            task,
                            backend,
                            num_envs,
                            length,
                            args.min_time,
                            args.episode_length,
                            args.seed,
                            rule,
                        )
                    except Exception as err:  # noqa: BLE001 - one failing configuration must not end the sweep
                        r = {"task": task, "backend": backend, "num_envs": num_envs, "error": repr(err)}
                        r["hfield_contacts"] = rule
                        print(f"{label} num_envs={num_envs}: FAILED {err!r}", flush=True)
                    else:
                        print(
                            f"{label} num_envs={num_envs}: {r['steps_per_s']:,.0f} steps/s "
                            f"(compile {r['compile_s']:.1f} s, scan {length}, {r['calls']} calls "
                            f"in {r['measure_s']:.1f} s)",
                            flush=True,
                        )
                    results.append(r)
                    jax.clear_caches()
                    gc.collect()

    headers = [
        "task",
        "backend",
        "contacts",
        "num_envs",
        "compile s",
        "first call s",
        "env steps/s",
        "us/env step",
    ]
    rows = [
        [
            r["task"],
            r["backend"],
            r.get("hfield_contacts", "mjx"),
            r["num_envs"],
            r.get("compile_s"),
            r.get("first_call_s"),
            r.get("steps_per_s"),
            r.get("us_per_env_step"),
        ]
        for r in results
    ]
    print()
    print(format_table(headers, rows))
    if args.json:
        write_json(args.json, {**info, "args": vars(args), "results": results})
        print(f"\nwritten to {args.json}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
