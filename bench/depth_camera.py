"""Cost of a forward depth image against one env step of Go1JoystickRoughTerrain.

For each env count and image size, `jax.jit(jax.vmap(depth_image))` renders every env's image
from its reset state (MJX's JAX implementation, the rough terrain's heightfield cast as
`strl_jax.envs.depth_camera` does), and `jax.jit(jax.vmap(env.step))` steps the task with zero
actions. Compilation is timed apart; steady-state times are the median of repeated calls over
at least `--min-time` seconds; on a CPU "depth/step (CPU time)" compares process CPU time, which
other processes on the same cores disturb less than wall time. "kept" is `step / (step + depth)`:
the fraction of the blind env's step rate left when every step also renders the image (training
keeps more, since the policy update costs the same with or without the camera, and less often
when the image refreshes every `--refresh` steps, as legged_gym parkour's 10 Hz camera does every
5 policy steps: the last column).

    python bench/depth_camera.py                       # 256 envs on this machine
    python bench/depth_camera.py --num-envs 64,256,1024 --sizes 24x32
    python bench/depth_camera.py --device-sized        # 4096 and 8192 envs, for a GPU
    python bench/depth_camera.py --integrated --sizes 24x32   # + strl_jax's env with env.forward_depth

`--integrated` also times the env as training steps it (`make_env_from_config`: `VecEnv.step`
with per-env physics, restarts of finished envs and both observations), blind and with
`env.forward_depth` of each size, where the image is cast once per reset and step: env steps per
second and the fraction of the blind rate kept (two more env compiles per env count and size).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from common import device_info, format_table, machine_info, write_json

import strl_jax  # noqa: F401  (its XLA:CPU defaults, before jax starts a backend)

TASK = "Go1JoystickRoughTerrain"
DEFAULT_SIZES = "12x16,24x32,48x64"


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """`"24x32,48x64"` -> `[(24, 32), (48, 64)]` (height x width)."""
    return [tuple(int(v) for v in item.split("x")) for item in text.split(",") if item]


def timed_calls(fn: Any, arg: Any, min_time: float) -> tuple[float, float]:
    """Median wall and process-CPU seconds of one call of compiled `fn(arg)`, over at least
    `min_time` seconds (CPU time stays comparable when other processes share the cores)."""
    import jax

    jax.block_until_ready(fn(arg))
    wall: list[float] = []
    cpu: list[float] = []
    start = time.perf_counter()
    while len(wall) < 3 or time.perf_counter() - start < min_time:
        w0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(arg))
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def compiled(fn: Any, arg: Any) -> tuple[Any, float]:
    """`fn` lowered and compiled for `arg`, and the seconds that took."""
    t0 = time.perf_counter()
    program = fn.lower(arg).compile()
    return program, time.perf_counter() - t0


def load_env() -> Any:
    """The task as strl_jax loads it: offline robot models and MJX's JAX implementation."""
    from mujoco_playground import registry

    from strl_jax.envs.menagerie import use_offline_menagerie
    from strl_jax.envs.playground_env import playground_config

    use_offline_menagerie(TASK)
    return registry.load(TASK, config=playground_config(TASK, {}))


def integrated_rows(env_counts: list[int], sizes: list[tuple[int, int]], min_time: float) -> list[dict]:
    """Env steps per second of strl_jax's batched env, blind and with each depth image size."""
    import jax
    import jax.numpy as jnp

    from strl_jax.configs.loader import resolve_config
    from strl_jax.envs import make_env_from_config

    records = []
    for num_envs in env_counts:
        blind_sps = float("nan")
        for size in [None, *sizes]:
            depth = [] if size is None else [f"env.forward_depth={{height: {size[0]}, width: {size[1]}}}"]
            cfg = resolve_config(TASK, overrides=depth)
            env = make_env_from_config(cfg.env, num_envs=num_envs)
            state, _ = jax.jit(env.reset)(jax.random.PRNGKey(0))
            args = (state, jnp.zeros((num_envs, env.action_size)))
            program, compile_s = compiled(jax.jit(lambda sa, env=env: env.step(*sa)), args)
            step_s, _ = timed_calls(program, args, min_time)
            sps = num_envs / step_s
            blind_sps = sps if size is None else blind_sps
            image = "-" if size is None else f"{size[0]}x{size[1]}"
            records.append(
                {
                    "num_envs": num_envs,
                    "image": image,
                    "step_ms": step_s * 1e3,
                    "env_steps_per_s": sps,
                    "kept": sps / blind_sps,
                    "compile_s": compile_s,
                }
            )
            print(f"{num_envs} envs, image {image}: VecEnv.step {step_s * 1e3:.2f} ms", flush=True)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-envs", default="256", help="comma-separated env counts")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated HxW image sizes")
    parser.add_argument("--device-sized", action="store_true", help="4096 and 8192 envs (GPU training sizes)")
    parser.add_argument("--min-time", type=float, default=3.0, help="seconds of timed calls per row")
    parser.add_argument("--no-step", action="store_true", help="skip the env step (its compile is long)")
    parser.add_argument("--hfield-steps", type=int, default=16, help="DepthCameraSpec.hfield_steps")
    parser.add_argument("--hfield-refine", type=int, default=8, help="DepthCameraSpec.hfield_refine")
    parser.add_argument("--refresh", type=int, default=5, help="steps per image for the last column")
    parser.add_argument(
        "--integrated", action="store_true", help="also time VecEnv.step with and without env.forward_depth"
    )
    parser.add_argument("--json", default="", help="also write the rows to this file")
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp

    from strl_jax.envs.depth_camera import DepthCameraSpec, depth_image
    from strl_jax.runners.runner import enable_compilation_cache

    enable_compilation_cache()
    env_counts = [4096, 8192] if args.device_sized else [int(n) for n in args.num_envs.split(",")]
    env = load_env()
    m = env.mjx_model
    on_cpu = jax.default_backend() == "cpu"
    rows, records = [], []
    for num_envs in env_counts:
        keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
        states = jax.jit(jax.vmap(env.reset))(keys)
        step_s, step_cpu, step_compile = float("nan"), float("nan"), float("nan")
        if not args.no_step:
            actions = jnp.zeros((num_envs, env.action_size))
            step = jax.jit(lambda sa: jax.vmap(env.step)(*sa))
            program, step_compile = compiled(step, (states, actions))
            step_s, step_cpu = timed_calls(program, (states, actions), args.min_time)
            print(f"{num_envs} envs: step {step_s * 1e3:.2f} ms (compile {step_compile:.1f} s)", flush=True)
        for height, width in parse_sizes(args.sizes):
            spec = DepthCameraSpec(
                height=height, width=width, hfield_steps=args.hfield_steps, hfield_refine=args.hfield_refine
            )
            render = jax.jit(jax.vmap(lambda d, spec=spec: depth_image(spec, m, d)))
            program, depth_compile = compiled(render, states.data)
            depth_s, depth_cpu = timed_calls(program, states.data, args.min_time)
            record = {
                "num_envs": num_envs,
                "image": f"{height}x{width}",
                "rays_per_env": height * width,
                "depth_ms": depth_s * 1e3,
                "depth_us_per_env": depth_s / num_envs * 1e6,
                "ns_per_ray": depth_s / (num_envs * height * width) * 1e9,
                "step_ms": step_s * 1e3,
                "step_us_per_env": step_s / num_envs * 1e6,
                "depth_over_step": depth_s / step_s,
                "depth_over_step_cpu_time": depth_cpu / step_cpu if on_cpu else float("nan"),
                "kept": step_s / (step_s + depth_s),
                "kept_refreshed": step_s / (step_s + depth_s / args.refresh),
                "depth_compile_s": depth_compile,
                "step_compile_s": step_compile,
                "spec": {k: getattr(spec, k) for k in spec.__dataclass_fields__},
            }
            records.append(record)
            numbers = [record[k] for k in list(record)[3:12]]
            rows.append(
                [num_envs, record["image"], height * width]
                + ["-" if v != v else f"{v:.3g}" for v in numbers]
                + [depth_compile, step_compile]
            )
            print(f"{num_envs} envs {height}x{width}: depth {depth_s * 1e3:.2f} ms", flush=True)
    headers = [
        "envs",
        "image",
        "rays/env",
        "depth ms",
        "depth us/env",
        "ns/ray",
        "step ms",
        "step us/env",
        "depth/step",
        "depth/step (CPU time)",
        "kept",
        f"kept, image every {args.refresh} steps",
        "depth compile s",
        "step compile s",
    ]
    print(f"\n{TASK} on {device_info()['device_kind']} ({jax.default_backend()})")
    print(format_table(headers, rows))
    integrated = []
    if args.integrated:
        integrated = integrated_rows(env_counts, parse_sizes(args.sizes), args.min_time)
        headers = ["envs", "image", "VecEnv.step ms", "env steps/s", "kept", "compile s"]
        keys = ("num_envs", "image", "step_ms", "env_steps_per_s", "kept", "compile_s")
        table = [[r[k] for k in keys] for r in integrated]
        print(f"\nstrl_jax's {TASK} env (make_env_from_config), blind and with env.forward_depth")
        print(format_table(headers, table))
    if args.json:
        write_json(
            args.json,
            {"machine": machine_info(), "device": device_info(), "rows": records, "integrated": integrated},
        )


if __name__ == "__main__":
    main()
