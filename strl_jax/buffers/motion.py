"""Expert motion library on the device, and jit-safe sampling of expert transitions.

All motions' frames are concatenated into one `[total_frames, frame_dim]` array so that sampling
is a gather with static shapes. A motion of `n` frames spaced `frame_duration` apart lasts
`(n - 1) * frame_duration`; time t within it is the linear interpolation of the two frames
around t (the frames of an AMP observation are feature vectors, so linear interpolation is what
they support; no slerp of embedded quaternions). Load one from disk with
`strl_jax.buffers.motion_files.load_motion_library`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class MotionLibrary:
    """Frames of `M` motions; `frames[start[m] : start[m] + num_frames[m]]` is motion m."""

    frames: jax.Array  # [total_frames, frame_dim] float32
    start: jax.Array  # [M] int32
    num_frames: jax.Array  # [M] int32, each >= 2
    frame_duration: jax.Array  # [M] float32 seconds between frames
    weight: jax.Array  # [M] float32 sampling weight (st_rl / AMP_for_hardware MotionWeight)
    names: tuple[str, ...] = struct.field(pytree_node=False, default=())

    @property
    def frame_dim(self) -> int:
        return int(self.frames.shape[-1])

    @property
    def num_motions(self) -> int:
        return int(self.start.shape[0])

    @property
    def duration(self) -> jax.Array:
        """[M] seconds from the first to the last frame of each motion."""
        return (self.num_frames - 1).astype(jnp.float32) * self.frame_duration


def make_motion_library(
    motions: Sequence[np.ndarray],
    frame_durations: Sequence[float],
    weights: Sequence[float] | None = None,
    names: Sequence[str] | None = None,
) -> MotionLibrary:
    """Concatenate `[T_m, d]` frame arrays into a library, checking what sampling relies on."""
    if not motions:
        raise ValueError("a motion library needs at least one motion")
    names = tuple(names) if names is not None else tuple(f"motion_{i}" for i in range(len(motions)))
    weights = [1.0] * len(motions) if weights is None else list(weights)
    if not len(names) == len(weights) == len(frame_durations) == len(motions):
        raise ValueError(
            f"got {len(motions)} motions but {len(frame_durations)} frame durations, "
            f"{len(weights)} weights and {len(names)} names"
        )
    arrays = [np.asarray(m, np.float32) for m in motions]
    for name, frames in zip(names, arrays, strict=True):
        if frames.ndim != 2:
            raise ValueError(
                f"motion {name!r}: frames must be [num_frames, frame_dim], got shape {frames.shape}"
            )
        if frames.shape[0] < 2:
            raise ValueError(f"motion {name!r} has {frames.shape[0]} frame(s); a transition needs at least 2")
        if frames.shape[1] != arrays[0].shape[1]:
            raise ValueError(
                f"motion {name!r} has frames of size {frames.shape[1]} but {names[0]!r} has "
                f"{arrays[0].shape[1]}; all motions must share one frame layout"
            )
        if not np.all(np.isfinite(frames)):
            raise ValueError(f"motion {name!r} has non-finite frame values")
    for name, fd, w in zip(names, frame_durations, weights, strict=True):
        if not fd > 0:
            raise ValueError(f"motion {name!r}: frame duration must be positive, got {fd}")
        if not w >= 0:
            raise ValueError(f"motion {name!r}: weight must be >= 0, got {w}")
    if not sum(weights) > 0:
        raise ValueError("motion weights sum to 0; at least one motion needs a positive weight")
    lengths = np.array([a.shape[0] for a in arrays], np.int32)
    return MotionLibrary(
        frames=jnp.asarray(np.concatenate(arrays, axis=0)),
        start=jnp.asarray(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)),
        num_frames=jnp.asarray(lengths),
        frame_duration=jnp.asarray(np.asarray(frame_durations, np.float32)),
        weight=jnp.asarray(np.asarray(weights, np.float32)),
        names=names,
    )


def interpolate_frames(lib: MotionLibrary, motion_ids: jax.Array, times: jax.Array) -> jax.Array:
    """Frames at `times[n]` seconds into motions `motion_ids[n]`, clamped to the motion's ends.

    Exactly frame k at t = k * frame_duration, linear in between.
    """
    n_frames = lib.num_frames[motion_ids]
    pos = times / lib.frame_duration[motion_ids]
    i0 = jnp.clip(jnp.floor(pos).astype(jnp.int32), 0, n_frames - 2)
    alpha = jnp.clip(pos - i0.astype(pos.dtype), 0.0, 1.0)[:, None]
    first = lib.frames[lib.start[motion_ids] + i0]
    second = lib.frames[lib.start[motion_ids] + i0 + 1]
    return (1.0 - alpha) * first + alpha * second


def sample_motion_pairs(
    lib: MotionLibrary, key: jax.Array, n: int, dt: float | jax.Array
) -> tuple[jax.Array, jax.Array]:
    """`(s[n, d], s_next[n, d])`: expert frames `dt` seconds apart.

    A motion is chosen with probability proportional to its weight, then t uniformly in
    `[0, duration - dt]`; s is the motion at t and s' at t + dt. A motion shorter than `dt` gives
    its first and last frame.
    """
    k_motion, k_time = jax.random.split(key)
    motion_ids = jax.random.categorical(k_motion, jnp.log(lib.weight), shape=(n,))
    span = jnp.maximum(lib.duration[motion_ids] - dt, 0.0)
    t = jax.random.uniform(k_time, (n,)) * span
    return interpolate_frames(lib, motion_ids, t), interpolate_frames(lib, motion_ids, t + dt)


def amp_observation(s: jax.Array, s_next: jax.Array) -> jax.Array:
    """The AMP observation of a transition: `concat(s, s')` along the feature axis."""
    return jnp.concatenate([s, s_next], axis=-1)


def sample_expert_amp_obs(lib: MotionLibrary, key: jax.Array, n: int, dt: float | jax.Array) -> jax.Array:
    """`n` expert AMP observations `[n, 2 * frame_dim]` (st_rl `ref_motion`), raw."""
    return amp_observation(*sample_motion_pairs(lib, key, n, dt))
