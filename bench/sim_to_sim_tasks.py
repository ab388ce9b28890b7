"""Sim-to-sim on every Playground locomotion task: C MuJoCo's physics under the task's own step
code (`strl_jax.envs.native_physics`) beside the JAX env (MJX), and how far the two agree.

    JAX_DISABLE_MOST_OPTIMIZATIONS=1 python bench/sim_to_sim_tasks.py [--tasks A B ...]
        [--steps 50] [--seed 0] [--json FILE]

Per task (default: every task of `mujoco_playground.registry.locomotion.ALL_ENVS`), one env on
the task's nominal model with noise-free observations (`strl_jax.native_episodes.nominal_env_config`), a
state reached by `WARMUP` JAX steps with small random actions (numpy, `--seed`):
- same state: the state's positions and velocities forward-computed by MJX and by C MuJoCo,
  observed through the task's own step: max abs difference of the policy observation (what a
  policy would see of one physical state; float32 vs float64 kinematics and sensors);
- one control step from that state with the same action (`native_step` vs the JAX step): max abs
  qpos / qvel differences and the reward difference;
- an open-loop episode of `--steps` steps, the same random action sequence on both sides, each
  side running on its own from that state: return on each side, the step at which each ends
  (done: a fall or the task's other termination) and the first step at which qpos differs by
  more than `QPOS_SPLIT`;
- a task the native path refuses is a row with its `ConfigError`; trace+compile and run seconds.

Why: the JAX side and the native side run the same task code, so every difference is the physics
engine (MJX vs C MuJoCo, float32 vs float64). The contact models differ: MJX makes one contact
per box foot (BerkeleyHumanoid, G1) where C MuJoCo makes four, so those robots split within one
control step, while sphere and capsule feet (Go1, T1) agree to 1e-5 in qpos after one step.
On height-field terrain C MuJoCo's box-hfield collider makes up to about ten contacts per box foot,
more than MJX's fixed contact layout holds (four), so the native state is converted with the four
deepest contacts per foot-terrain pair (`native_physics.fit_contacts`; C MuJoCo's step used them all,
and BerkeleyHumanoid and G1 read foot contact through sensors, not the contact list).
Tasks whose reward is clipped at zero (Go1 and H1 joystick) score 0 on both sides under random
actions.
An open-loop episode is chaotic (a random action sequence without feedback): where the two sides
split says how long the engines agree, not whether a trained policy transfers (`bench/sim_to_sim.py`
measures that).

Compiling each task's JAX step and the native path's phases takes far longer than running them.
`JAX_DISABLE_MOST_OPTIMIZATIONS=1` (XLA's backend optimisation level 0) compiles them much faster;
it changes the rounding of float32 arithmetic (no fused multiply-adds), at 1e-7 relative, far
below the engine differences this measures; the JSON records the setting.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from common import format_table, machine_info, write_json

from strl_jax.configs.loader import resolve_config
from strl_jax.envs import native_physics as npx
from strl_jax.envs.playground_env import flatten
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.errors import ConfigError
from strl_jax.native_episodes import NOISE_LEVEL_KEYS, nominal_env_config

TINY_NET = ["policy.actor_hidden_dims=[8]", "policy.critic_hidden_dims=[8]"]
WARMUP = 3  # JAX steps with random actions before the checks (a state that is not the reset's)
ACTION_SCALE = 0.5  # random actions uniform in [-ACTION_SCALE, ACTION_SCALE]
QPOS_SPLIT = 1e-2  # the episode's qpos difference at which the two sides count as split apart


def locomotion_tasks() -> tuple[str, ...]:
    from mujoco_playground import registry

    return tuple(registry.locomotion.ALL_ENVS)


def noise_keys(task: str) -> tuple[str, ...]:
    """The observation-noise levels (`NOISE_LEVEL_KEYS`) the task's default config has."""
    from mujoco_playground import registry

    flat = flatten(registry.get_default_config(task).to_dict())
    return tuple(k for k in NOISE_LEVEL_KEYS if isinstance(flat.get(k), int | float))


def jax_step_function(vec: Any) -> Any:
    """The single env's step as `VecEnv.step` makes it (and `native_step` mirrors): the action
    clipped to `clip_actions`, held for `action_repeat` control steps, rewards summed."""

    def step(state: Any, action: jax.Array) -> Any:
        if vec.clip_actions is not None:
            action = jnp.clip(action, -vec.clip_actions, vec.clip_actions)
        reward = done = jnp.zeros_like(state.reward)
        for _ in range(vec.action_repeat):
            state = vec.env.step(state, action)
            reward, done = reward + state.reward, jnp.maximum(done, state.done)
        return state.replace(reward=reward, done=done)

    return jax.jit(step)


def forward_native(sim: npx.NativeSimulation, data: Any) -> Any:
    """The MJX data's positions, velocities and inputs forward-computed by C MuJoCo (as MJX data)."""
    native = mujoco.MjData(sim.model)
    for name in npx.RESET_FIELDS:
        target = getattr(native, name)
        target[:] = np.asarray(getattr(data, name), np.float64).reshape(target.shape)
    native.time = float(data.time)
    mujoco.mj_forward(sim.model, native)
    return npx.to_mjx(sim, native)


def max_abs(a: Any, b: Any) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0.0))


def episode(sim: npx.NativeSimulation, jax_step: Any, start: Any, actions: list[np.ndarray]) -> dict:
    """Both sides from `start` with `actions`, each on its own until it ends (done) or runs out."""
    data, native = npx.native_reset(sim, start)
    state = start
    out = {"native_return": 0.0, "jax_return": 0.0, "native_done": None, "jax_done": None, "split": None}
    for t, action in enumerate(actions, start=1):
        if out["native_done"] is None:
            native, _ = npx.native_step(sim, data, native, action)
            out["native_return"] += float(native.reward)
            out["native_done"] = t if float(native.done) > 0 else None
        if out["jax_done"] is None:
            state = jax_step(state, jnp.asarray(action, jnp.float32))
            out["jax_return"] += float(state.reward)
            out["jax_done"] = t if float(state.done) > 0 else None
        running = out["native_done"] in (None, t) and out["jax_done"] in (None, t)
        if out["split"] is None and running and max_abs(data.qpos, state.data.qpos) > QPOS_SPLIT:
            out["split"] = t
        if out["native_done"] is not None and out["jax_done"] is not None:
            break
    return out


def measure(task: str, steps: int, seed: int) -> dict[str, Any]:
    """One task's row (see the module docstring)."""
    from mujoco import mjx

    begin = time.perf_counter()
    cfg = resolve_config(task, overrides=TINY_NET)
    env_cfg = nominal_env_config(cfg.env, WARMUP + steps + 1, noise_keys(task))
    vec = make_env_from_config(env_cfg, num_envs=1)
    sim = npx.native_simulation(vec)
    jax_step = jax_step_function(vec)
    forward = jax.jit(mjx.forward)
    mjx_model = npx.mjx_env_of(vec.env).mjx_model

    rng = np.random.default_rng(seed)
    state = jax.jit(vec.env.reset)(jax.random.PRNGKey(seed))
    for _ in range(WARMUP):
        state = jax_step(
            state, jnp.asarray(rng.uniform(-ACTION_SCALE, ACTION_SCALE, vec.action_size), jnp.float32)
        )
    actions = [rng.uniform(-ACTION_SCALE, ACTION_SCALE, vec.action_size) for _ in range(steps + 1)]
    # the first call of each program (the native phases included) compiles it
    data, native = npx.native_reset(sim, state)
    npx.native_step(sim, data, native, actions[0])
    jax.block_until_ready(
        sim.observe(sim.finish(state, jnp.zeros(vec.action_size), forward(mjx_model, state.data)))
    )
    compiled = time.perf_counter()

    action = jnp.asarray(actions[0], jnp.float32)
    via_mjx = sim.finish(state, action, forward(mjx_model, state.data))
    via_c = sim.finish(state, action, forward_native(sim, state.data))
    obs_c, obs_mjx = sim.observe(via_c), sim.observe(via_mjx)
    group = "policy" if "policy" in obs_c else next(iter(obs_c))
    same_obs = max_abs(obs_c[group], obs_mjx[group])

    data, native = npx.native_reset(sim, state)
    native, _ = npx.native_step(sim, data, native, actions[0])
    stepped = jax_step(state, action)
    row = {
        "task": task,
        "status": "ok",
        "n_substeps": sim.n_substeps,
        "ctrl_dt": float(vec.env.dt),
        "warmup_done": bool(float(state.done) > 0),
        "same_state_obs": same_obs,
        "step_qpos": max_abs(data.qpos, stepped.data.qpos),
        "step_qvel": max_abs(data.qvel, stepped.data.qvel),
        "step_reward": float(native.reward) - float(stepped.reward),
        **episode(sim, jax_step, state, actions[1:]),
    }
    row["compile_s"] = compiled - begin
    row["run_s"] = time.perf_counter() - compiled
    return row


def run_task(task: str, steps: int, seed: int) -> dict[str, Any]:
    """`measure`, with a refusal (`ConfigError`) or a failure as the row instead of a crash."""
    begin = time.perf_counter()
    try:
        row = measure(task, steps, seed)
    except ConfigError as err:
        row = {"task": task, "status": "refused", "error": str(err)}
    except Exception as err:  # noqa: BLE001 - one task's failure is its row; the others still run
        row = {"task": task, "status": "error", "error": f"{type(err).__name__}: {err}"}
        row["traceback"] = traceback.format_exc()
    row.setdefault("compile_s", time.perf_counter() - begin)
    row.setdefault("run_s", 0.0)
    jax.clear_caches()
    gc.collect()
    return row


def ended(step: int | None) -> str:
    return "-" if step is None else str(step)


def table(rows: list[dict]) -> str:
    headers = [
        "task",
        "obs diff (same state)",
        "qpos diff (1 step)",
        "qvel diff (1 step)",
        "reward diff (1 step)",
        "return native",
        "return JAX",
        "done native",
        "done JAX",
        f"qpos split > {QPOS_SPLIT:g}",
        "compile s",
        "run s",
    ]
    body = []
    for r in rows:
        if r["status"] != "ok":
            body.append([r["task"], f"{r['status']} (below)", *["-"] * 8, f"{r['compile_s']:.0f}", "-"])
            continue
        body.append(
            [
                r["task"],
                f"{r['same_state_obs']:.1e}",
                f"{r['step_qpos']:.1e}",
                f"{r['step_qvel']:.1e}",
                f"{r['step_reward']:+.1e}",
                f"{r['native_return']:.3f}",
                f"{r['jax_return']:.3f}",
                ended(r["native_done"]),
                ended(r["jax_done"]),
                ended(r["split"]),
                f"{r['compile_s']:.0f}",
                f"{r['run_s']:.1f}",
            ]
        )
    notes = [f"- {r['task']}: {r['error'].splitlines()[0]}" for r in rows if r["status"] != "ok"]
    return "\n".join([format_table(headers, body), *([""] if notes else []), *notes])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=None, help="default: every Playground locomotion task")
    parser.add_argument("--steps", type=int, default=50, help="open-loop episode length (control steps)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the rows and the machine as JSON")
    args = parser.parse_args(argv)

    tasks = args.tasks or list(locomotion_tasks())
    begin = time.perf_counter()
    rows = []
    for task in tasks:
        rows.append(run_task(task, args.steps, args.seed))
        r = rows[-1]
        print(
            f"{task}: {r['status']} ({r['compile_s']:.0f} s compile, {r['run_s']:.1f} s run)", file=sys.stderr
        )
    wall = time.perf_counter() - begin
    quick = os.environ.get("JAX_DISABLE_MOST_OPTIMIZATIONS", "") not in ("", "0", "false", "False")
    print(
        f"{len(tasks)} tasks, nominal physics, noise-free observations, 1 env, {WARMUP} warm-up JAX steps, "
        f"open-loop episode of {args.steps} steps (actions uniform in +-{ACTION_SCALE}, seed {args.seed}); "
        "diffs are max abs C MuJoCo vs MJX; done/split: control step (- never)\n"
    )
    print(table(rows))
    ok = sum(r["status"] == "ok" for r in rows)
    print(
        f"\n{ok}/{len(rows)} tasks ran on the generic native path; total {wall:.0f} s "
        f"(JAX_DISABLE_MOST_OPTIMIZATIONS={'1' if quick else 'unset'})"
    )
    if args.json:
        settings = {
            "steps": args.steps,
            "seed": args.seed,
            "warmup": WARMUP,
            "action_scale": ACTION_SCALE,
            "qpos_split": QPOS_SPLIT,
            "disable_most_optimizations": quick,
            "jax": jax.__version__,
            "mujoco": mujoco.__version__,
        }
        write_json(args.json, {"settings": settings, "rows": rows, "wall_s": wall, "machine": machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
