"""`python -m strl_jax.play <log_dir>`: watch a trained policy (or `<mutex.yaml>`: a mutex policy
of several runs, `strl_jax.mutex`).

Runs deterministic (mean-action) episodes of a checkpoint's policy on fresh environments,
prints the mean/std of return and length, and writes one episode: for Brax tasks a brax HTML
viewer page, for MuJoCo Playground tasks a trajectory file (`episode.npz`: qpos, qvel, time per
step, replayable in MuJoCo's viewer), and for both an animated GIF where MuJoCo can render
offscreen (e.g. with MUJOCO_GL=egl).
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.commands import with_command
from strl_jax.envs.tasks import env_family
from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import CheckpointError, ConfigError
from strl_jax.inference import load_policy
from strl_jax.mutex import MutexPolicy
from strl_jax.mutex_from_runs import load_mutex_run
from strl_jax.networks.acting import Actor, make_actor
from strl_jax.networks.policy import make_policy_model
from strl_jax.train_loops.evaluation import episode_rollout, locomotion_summary


def physics_frame(env: VecEnv, state: Any) -> Any:
    """What a viewer needs of one env's state: brax's pipeline state, or Playground's `qpos`,
    `qvel` and time (the rest follows from the model)."""
    if env_family(env) == "brax":
        return state.pipeline_state
    return {"qpos": state.data.qpos, "qvel": state.data.qvel, "time": state.data.time}


def run_episodes(
    env: VecEnv, actor: Actor, params: Any, normalizers: Any, key: jax.Array
) -> tuple[jax.Array, jax.Array, Any, dict]:
    """One deterministic episode per env: `(returns [N], lengths [N], frames of env 0 [T, ...],
    locomotion metrics)` (velocity tracking and falls where the env measures them, else {}).

    Frame t is the physics state env 0 acted on at step t (entries past its episode's length
    belong to later episodes and are to be cut off).
    """
    returns, lengths, frames, probe = episode_rollout(
        env,
        lambda obs, hidden: actor.act(params, normalizers, obs, hidden),
        actor.initial_hidden(env.num_envs),
        key,
        reset_hidden=actor.reset_hidden,
        record=lambda env_state: physics_frame(env, jax.tree.map(lambda x: x[0], env_state.brax_state)),
    )
    return returns, lengths, frames, locomotion_summary(env, lengths, probe)


def run_mutex_episodes(
    env: VecEnv, policy: MutexPolicy, key: jax.Array
) -> tuple[jax.Array, jax.Array, Any, dict]:
    """`run_episodes` for a mutex policy: it reads the `policy` group and resets its own state."""
    returns, lengths, frames, probe = episode_rollout(
        env,
        lambda obs, state: policy.step(obs["policy"], state),
        policy.initial_hidden(env.num_envs),
        key,
        reset_hidden=policy.reset,
        record=lambda env_state: physics_frame(env, jax.tree.map(lambda x: x[0], env_state.brax_state)),
    )
    return returns, lengths, frames, locomotion_summary(env, lengths, probe)


def make_rollout(env: VecEnv, cfg: TrainConfig) -> Callable:
    """Jitted `(params, normalizers, key) -> run_episodes(...)`: the parameters are arguments,
    not constants, so one compiled program serves every checkpoint of a config."""
    actor = make_actor(
        make_policy_model(env.action_size, cfg.policy, env.components, env.component_shapes), cfg
    )
    return jax.jit(lambda params, normalizers, key: run_episodes(env, actor, params, normalizers, key))


def episode_states(frames: Any, length: int) -> list[Any]:
    """The first `length` stacked frames as a list of single states (what brax's viewers take)."""
    frames = jax.device_get(frames)
    return [jax.tree.map(lambda x, t=t: x[t], frames) for t in range(length)]


def write_html(env: VecEnv, states: list[Any], path: Path) -> Path:
    from brax.io import html

    path.write_text(html.render(env.env.sys, states, colab=False))
    return path


def write_trajectory(env: VecEnv, states: list[Any], path: Path) -> Path:
    """A Playground episode as arrays: `qpos`, `qvel`, `time` [T, ...], the step `dt` and the
    task, enough to replay it on the task's MuJoCo model (`env.mj_model`)."""
    np.savez(
        path,
        qpos=np.stack([s["qpos"] for s in states]),
        qvel=np.stack([s["qvel"] for s in states]),
        time=np.stack([s["time"] for s in states]),
        dt=env.dt,
        task=env.task,
    )
    return path


def render_mujoco(env: VecEnv, states: list[Any], size: tuple[int, int]) -> list[np.ndarray]:
    """Frames of a Playground episode rendered with MuJoCo's own renderer."""
    import mujoco

    model = env.env.mj_model
    data = mujoco.MjData(model)
    with mujoco.Renderer(model, height=size[0], width=size[1]) as renderer:
        frames = []
        for s in states:
            data.qpos[:], data.qvel[:] = s["qpos"], s["qvel"]
            mujoco.mj_forward(model, data)
            renderer.update_scene(data)
            frames.append(renderer.render().copy())
    return frames


@functools.cache
def offscreen_problem() -> str | None:
    """Why MuJoCo cannot render offscreen in this process (no OpenGL context: no display for
    GLFW, or the `MUJOCO_GL` backend missing), or None when it can. Asked once per process: the
    backend is fixed when mujoco is imported, and a second failed context creation aborts."""
    try:
        import mujoco

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GLFW's complaints about a missing display
            with mujoco.Renderer(mujoco.MjModel.from_xml_string("<mujoco/>"), 8, 8):
                pass
    except Exception as err:  # noqa: BLE001 - mujoco raises several kinds when no GL backend exists
        return f"{type(err).__name__}: {str(err).split(',')[0][:100]}"
    return None


def write_gif(env: VecEnv, states: list[Any], path: Path, size: tuple[int, int] = (240, 320)) -> str | None:
    """Render the episode offscreen; returns why not when MuJoCo has no OpenGL context here.
    Where it has one, a failure to render is an error and raises."""
    problem = offscreen_problem()
    if problem is not None:
        return problem
    from brax.io import image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GLFW's complaints about a missing display
        if env_family(env) == "brax":
            frames = image.render_array(env.env.sys, states, height=size[0], width=size[1])
        else:
            frames = render_mujoco(env, states, size)
    from PIL import Image

    images = [Image.fromarray(np.asarray(f)) for f in frames]
    duration_ms = env.dt * 1000.0
    images[0].save(path, save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.play",
        description="Run a trained policy deterministically and write a viewable episode.",
    )
    parser.add_argument(
        "log_dir",
        help="run folder (or checkpoints folder, or one checkpoint step folder); or a mutex YAML config",
    )
    parser.add_argument("--checkpoint", type=int, metavar="N", help="checkpoint step (default: newest)")
    parser.add_argument("--episodes", type=int, default=10, metavar="K", help="episodes to run (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial states")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: <log_dir>/play)")
    parser.add_argument("--no-video", action="store_true", help="skip the GIF even if MuJoCo can render")
    parser.add_argument(
        "--command",
        type=float,
        nargs=3,
        metavar=("VX", "VY", "WZ"),
        help="joystick tasks: hold this velocity command (m/s, m/s, rad/s) for the whole episode",
    )
    return parser.parse_args(argv)


def play_episodes(args: argparse.Namespace, mutex: bool) -> tuple:
    """`(env, task, what acted, (returns, lengths, frames, metrics))` of `args.episodes`
    deterministic episodes of a run's checkpoint or a mutex config's switch."""
    key = jax.random.PRNGKey(args.seed)
    if mutex:
        run = load_mutex_run(args.log_dir)
        env, task = run.env.replace(num_envs=args.episodes), run.cfg.env.task
        env = env if args.command is None else with_command(env, args.command)
        rollout = jax.jit(lambda key: run_mutex_episodes(env, run.policy, key))
        return env, task, f"{run.policy.spec.num_policies} sub-policies", jax.device_get(rollout(key))
    loaded = load_policy(args.log_dir, args.checkpoint)
    env, task = loaded.env.replace(num_envs=args.episodes), loaded.cfg.env.task
    env = env if args.command is None else with_command(env, args.command)
    out = make_rollout(env, loaded.cfg)(loaded.params, loaded.normalizers, key)
    return env, task, f"checkpoint {loaded.step}", jax.device_get(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.episodes < 1:
        print("error: --episodes must be at least 1", file=sys.stderr)
        return 2
    mutex = Path(args.log_dir).suffix in (".yaml", ".yml") and Path(args.log_dir).is_file()
    try:
        env, task, what, (returns, lengths, frames, metrics) = play_episodes(args, mutex)
    except (CheckpointError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    held = "" if args.command is None else ", command ({:g}, {:g}, {:g}) held".format(*args.command)
    print(
        f"{task}, {what}, {args.episodes} deterministic episodes{held}:\n"
        f"  return {np.mean(returns):.3f} +- {np.std(returns):.3f}\n"
        f"  length {np.mean(lengths):.1f} +- {np.std(lengths):.1f}"
    )
    if metrics:
        print(
            f"  velrmsd {float(metrics['velrmsd']):.3f} (velocity-tracking RMS error), "
            f"falls {float(metrics['falls']):.0%} (episodes ended before {env.episode_length} steps)"
        )
    default_out = Path(args.log_dir).with_name(f"{Path(args.log_dir).stem}_play") if mutex else None
    out = Path(args.out) if args.out else default_out or Path(args.log_dir) / "play"
    out.mkdir(parents=True, exist_ok=True)
    states = episode_states(frames, int(lengths[0]))
    if env_family(env) == "brax":
        page = write_html(env, states, out / "episode.html")
    else:
        page = write_trajectory(env, states, out / "episode.npz")
    print(f"episode 0 (return {returns[0]:.3f}, {len(states)} steps): {page}")
    if args.no_video:
        return 0
    try:
        reason = write_gif(env, states, out / "episode.gif")
    except Exception as err:  # noqa: BLE001 - MuJoCo can render here: any failure is reported as one
        print(f"error: the episode could not be rendered ({type(err).__name__}: {err})", file=sys.stderr)
        return 1
    if reason is None:
        print(f"video: {out / 'episode.gif'}")
    else:
        print(f"video skipped, MuJoCo cannot render here ({reason}); try MUJOCO_GL=egl or MUJOCO_GL=osmesa")
    return 0


if __name__ == "__main__":
    sys.exit(main())
