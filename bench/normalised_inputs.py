"""What a run's actor reads at its checkpoints: the envs' current observations, normalised with the
checkpoint's own statistics, and which of them lie far out (BENCHMARKS.md, "Why seed 2 ran away").

A checkpoint holds every training env's current observation and the normaliser's statistics, so
the inputs of the iteration it was written before can be read without running anything. Per
checkpoint: how many envs have some normalised value beyond `--beyond` standard deviations, how
many of those are in an episode's first `--frames` steps (a task with a history of frames fills
the older ones with zeros at a start), which features (index within one frame of
`--frame-size` values) reach that far, the largest value, and the normaliser's standard
deviation of those features.

    python bench/normalised_inputs.py RUN --checkpoints 402 465 521 --frame-size 31 --frames 15
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def normalised_inputs(raw: dict, group: str = "policy") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(normalised observations [envs, size], the envs' steps into their episodes, the std)."""
    env_state = raw["rollout_state"]["env_state"]
    stats = raw["train_state"]["normalizers"][group]
    obs = np.asarray(env_state["brax_state"]["obs"])
    if isinstance(obs, dict) or obs.ndim != 2:
        raise SystemExit(f"error: the env's observation is not one [envs, size] array: {type(obs).__name__}")
    from strl_jax.networks.normalizer import NormalizerState, normalize

    state = NormalizerState(mean=np.asarray(stats["mean"]), var=np.asarray(stats["var"]), count=None)
    z = np.asarray(normalize(state, obs))  # as the actor reads them, clip aside
    return z, np.asarray(env_state["step_count"]), np.sqrt(np.asarray(stats["var"]))


def describe(
    z: np.ndarray, steps: np.ndarray, std: np.ndarray, beyond: float, frame: int, frames: int
) -> dict:
    """The figures of one checkpoint (`std`: each feature's newest frame)."""
    far = np.abs(z) > beyond
    envs = far.any(axis=1)
    features = sorted({int(i) % frame for i in np.flatnonzero(far.any(axis=0))})
    return {
        "envs": int(z.shape[0]),
        "envs_beyond": int(envs.sum()),
        "of_them_in_first_frames": int((envs & (steps < frames)).sum()),
        "envs_in_first_frames": int((steps < frames).sum()),
        "features_beyond": features,
        "largest": round(float(np.abs(z).max()), 2),
        "std_of_those_features": {f: round(float(std[f]), 4) for f in features},
    }


def main(argv: list[str] | None = None) -> int:
    from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR, open_manager, restore_raw

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="the run folder (its checkpoints/)")
    p.add_argument("--checkpoints", type=int, nargs="+", required=True)
    p.add_argument("--beyond", type=float, default=5.0, help="standard deviations (default 5)")
    p.add_argument("--frame-size", type=int, default=None, help="values per frame (default: the whole obs)")
    p.add_argument("--frames", type=int, default=1, help="frames of history (default 1)")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = p.parse_args(argv)
    manager = open_manager(args.run / CHECKPOINT_DIR, read_only=True)
    steps = sorted(manager.all_steps())
    missing = [c for c in args.checkpoints if c not in steps]
    if missing:
        raise SystemExit(f"error: no checkpoints {missing} in {args.run / CHECKPOINT_DIR}; there are {steps}")
    result = {}
    for checkpoint in args.checkpoints:
        raw, _ = restore_raw(manager, checkpoint)
        z, episode_steps, std = normalised_inputs(raw)
        frame = args.frame_size or z.shape[1]
        result[checkpoint] = describe(z, episode_steps, std, args.beyond, frame, args.frames)
        print(checkpoint, json.dumps(result[checkpoint]))
    manager.close()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
