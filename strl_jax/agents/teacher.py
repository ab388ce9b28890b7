"""A frozen teacher policy for TPPO and Distillation: an `Actor` of another run plus its arrays.

The teacher keeps its own network and its own observation normaliser; it reads one observation
group of the student's environment (by default `critic`, st_rl's `label_action_with_critic_obs`).
Its parameters and normaliser statistics travel in the train state, so a resumed run continues
with exactly the teacher it started with, and the learner never updates them. Loading a teacher
from a checkpoint is the job of `runners.teachers`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from flax import struct

from strl_jax.networks.acting import Actor
from strl_jax.networks.normalizer import NormalizerState


@struct.dataclass
class TeacherState:
    """The teacher's parameters and its run's normalisers (by the teacher run's group names)."""

    params: Any
    normalizers: dict[str, NormalizerState]


@dataclasses.dataclass(frozen=True, eq=False)
class Teacher:
    """Static description of the teacher plus the arrays it was loaded with (`initial_state`)."""

    actor: Actor  # reads the student env's `actor.obs_group`; never clips (labels are raw means)
    from_sample: bool  # labels are samples of the teacher's Gaussian, not its mean
    initial_state: TeacherState
    source: str = ""  # where it was loaded from, for messages
    input_layout: tuple = ()  # named components of the teacher's actor input, where known

    def initial_hidden(self, num_envs: int) -> dict:
        """Only the actor's memory: the teacher's critic is never run."""
        return self.actor.initial_hidden(num_envs)

    def reset_hidden(self, hidden: dict, done: jax.Array) -> dict:
        return self.actor.reset_hidden(hidden, done)

    def distribution(self, state: TeacherState, obs: dict, hidden: dict):
        """`(mean, std, hidden')` of the teacher for the student env's raw observation groups."""
        return self.actor.distribution(state.params, state.normalizers, obs, hidden)

    def label(self, state: TeacherState, obs: dict, hidden: dict, keys: jax.Array, latents=()):
        """`(action labels, {name: latent}, hidden')`: the mean action, or with `from_sample` a
        sample (one key per env), as the env receives it (tanh of it for a `tanh_gaussian`
        teacher), and the `latents` (`networks.latents.LatentSource`) asked for."""
        mean, std, hidden, estimates = self.actor.forward(state.params, state.normalizers, obs, hidden)
        dist = self.actor.model.action_dist  # labels are actions as the env receives them
        labels = dist.postprocess(jax.vmap(dist.sample)(keys, mean, std) if self.from_sample else mean)
        actor_input = self.actor.actor_input(state.normalizers, obs)
        values = {src.name: src.read(estimates, actor_input) for src in latents}
        return jax.lax.stop_gradient(labels), jax.lax.stop_gradient(values), hidden
