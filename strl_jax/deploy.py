"""`python -m strl_jax.deploy <log_dir>`: sim-to-sim check of an exported policy in native MuJoCo.

The run's exported ONNX policy runs in C MuJoCo beside the same episodes in the JAX env
(`strl_jax.native_episodes`: the two native paths, `--native generic` for any Playground task
whose step calls `mjx_env.step`, `--native hand` for Go1's numpy twin), on nominal physics with
noise-free observations. Prints per episode and on average: return, velocity-tracking RMS
errors (xy linear velocity, yaw rate), episode length, falls; `--video` renders episode 0
offscreen, `--viewer` shows it in MuJoCo's viewer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from strl_jax.envs import native_mujoco as nm
from strl_jax.errors import CheckpointError, ConfigError, ExportError
from strl_jax.inference import load_policy
from strl_jax.native_episodes import (
    METRICS,
    NATIVE_PATHS,
    Comparison,
    compare,
    exported_onnx,
    load_onnx_policy,
    mean_metrics,
    native_model,
)


def format_report(result: Comparison) -> str:
    """Per-episode rows and the means, native beside JAX."""
    head = f"{'episode':>8} " + " ".join(f"{'native ' + k:>20}" for k in METRICS)
    if result.jax:
        head += " " + " ".join(f"{'jax ' + k:>17}" for k in METRICS)
    lines = [head]
    rows = [(str(i), n, result.jax[i] if result.jax else None) for i, n in enumerate(result.native)]
    rows.append(("mean", mean_metrics(result.native), mean_metrics(result.jax) if result.jax else None))
    for name, native, jax_row in rows:
        line = f"{name:>8} " + " ".join(f"{native[k]:>20.4f}" for k in METRICS)
        if jax_row is not None:
            line += " " + " ".join(f"{jax_row[k]:>17.4f}" for k in METRICS)
        lines.append(line)
    return "\n".join(lines)


# ---- viewing ----------------------------------------------------------------------------------------
def video_recorder(model: Any, size: tuple[int, int] = (240, 320)) -> tuple[Callable, list]:
    """A frame callback that renders `model`'s data offscreen, and the list it fills (raises
    without GL)."""
    import mujoco

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GLFW's complaints about a missing display
        renderer = mujoco.Renderer(model, height=size[0], width=size[1])
    frames: list[np.ndarray] = []

    def frame(data: Any) -> None:
        renderer.update_scene(data)
        frames.append(renderer.render().copy())

    return frame, frames


def write_video(frames: list[np.ndarray], path: Path, fps: float) -> None:
    """GIF through PIL; MP4 through mediapy, which needs an ffmpeg executable."""
    if path.suffix.lower() == ".gif":
        from PIL import Image

        images = [Image.fromarray(f) for f in frames]
        images[0].save(path, save_all=True, append_images=images[1:], duration=1000.0 / fps, loop=0)
        return
    import mediapy

    mediapy.write_video(path, frames, fps=fps)


def viewer_callback(model: Any, dt: float) -> Callable:
    """A frame callback that syncs MuJoCo's passive viewer at `dt` per frame (needs a display)."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY") and sys.platform == "linux":
        raise ConfigError("--viewer needs a display (DISPLAY is not set); use --video FILE.gif instead")
    import mujoco.viewer

    handle: dict[str, Any] = {}

    def frame(data: Any) -> None:
        if "viewer" not in handle:
            handle["viewer"] = mujoco.viewer.launch_passive(model, data)
        handle["viewer"].sync()
        time.sleep(dt)

    return frame


# ---- CLI ----------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.deploy",
        description="Run a run's exported ONNX policy in native MuJoCo beside the JAX evaluation.",
    )
    parser.add_argument(
        "--native",
        choices=NATIVE_PATHS,
        default="generic",
        help="generic (default): C MuJoCo's physics under the task's own observation, reward and "
        "commands, any Playground task whose step calls mjx_env.step; hand: the numpy twin of the "
        "Go1 joystick tasks (a check of the generic path)",
    )
    parser.add_argument("log_dir", help="run folder (or checkpoints folder, or one checkpoint step folder)")
    parser.add_argument("--checkpoint", type=int, metavar="N", help="checkpoint step (default: newest)")
    parser.add_argument("--episodes", type=int, default=8, metavar="K", help="episodes (default 8)")
    parser.add_argument(
        "--episode_length", type=int, metavar="T", help="steps per episode (default: the run's)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of initial states and commands")
    parser.add_argument(
        "--command",
        type=float,
        nargs=3,
        metavar=("VX", "VY", "YAW_RATE"),
        help="fixed command (default: sampled)",
    )
    parser.add_argument(
        "--no-jax", action="store_true", help="native episodes only (own starts and commands)"
    )
    parser.add_argument(
        "--video", metavar="FILE", help="render episode 0 offscreen to FILE (.gif, or .mp4 with ffmpeg)"
    )
    parser.add_argument(
        "--viewer", action="store_true", help="show episode 0 in MuJoCo's viewer (needs a display)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the per-episode metrics as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.episodes < 1 or (args.episode_length is not None and args.episode_length < 1):
        print("error: --episodes and --episode_length must be at least 1", file=sys.stderr)
        return 2
    try:
        loaded = load_policy(args.log_dir, args.checkpoint)
        if args.native == "hand":
            nm.require_supported(loaded.cfg.env.task)
        policy = load_onnx_policy(exported_onnx(Path(args.log_dir), loaded, args.checkpoint))
        model, dt = native_model(loaded, args.native)
        frame, frames = None, None
        if args.viewer:
            frame = viewer_callback(model, dt)
        elif args.video:
            try:
                frame, frames = video_recorder(model)
            except Exception as err:  # noqa: BLE001 - mujoco raises several kinds when no GL backend exists
                reason = type(err).__name__
                print(f"video skipped, MuJoCo cannot render here ({reason}); try MUJOCO_GL=egl or osmesa")
        result = compare(
            loaded,
            policy,
            args.episodes,
            args.seed,
            args.episode_length,
            args.command,
            not args.no_jax,
            frame,
            args.native,
        )
    except (CheckpointError, ConfigError, ExportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"{loaded.cfg.env.task}, checkpoint {loaded.step}, {args.episodes} episodes, nominal physics, "
        f"noise-free observations, {args.native} native path "
        f"(native {result.native_seconds:.1f} s, JAX {result.jax_seconds:.1f} s)"
    )
    print(format_report(result))
    if frames:
        try:
            write_video(frames, Path(args.video), 1.0 / dt)
            print(f"video: {args.video}")
        except Exception as err:  # noqa: BLE001 - a missing encoder is reported, not raised
            print(f"video not written ({type(err).__name__}: {str(err)[:100]}); a .gif needs only PIL")
    if args.json:
        Path(args.json).write_text(json.dumps(dataclasses.asdict(result), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
