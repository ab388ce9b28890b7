"""TPPO (st_rl): PPO guided by a frozen teacher, as a rollout hook plus one loss term.

The hook labels every step with the teacher's action and, in environments whose per-episode
"teacher acts" mask is set, executes that label instead of the student's sample. The mask is
redrawn with probability `teacher_act_prob(iteration)` whenever an episode ends. The stored
log-probability is always the student's log-probability of the *executed* action, so PPO
ratios on teacher-driven steps compare the new student with the acting student on the same
action (the parkour fork stores the log-probability of the student's own sample there).

The loss term `distillation_loss` pulls the student's action mean towards the labels with one
of st_rl's `distill_target`s; with `using_ppo: false` it is the only term (DAgger).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.agents.schedules import Schedule
from strl_jax.agents.teacher import Teacher, TeacherState
from strl_jax.networks.gaussian import gaussian_log_prob

DISTILL_TARGETS = ("real", "mse_sum", "l1", "tanh", "scaled_tanh", "max_log_prob")


def _binary_cross_entropy(p: jax.Array, target: jax.Array) -> jax.Array:
    """Element-wise BCE with torch's clamp of each log at -100.

    Probabilities are clipped into [0, 1] first: the tanh targets assume tanh-squashed actions,
    and an unsquashed mean outside [-1, 1] would otherwise give NaN (torch raises instead).
    """
    p = jnp.clip(p, 0.0, 1.0)
    log_p = jnp.maximum(jnp.log(p), -100.0)
    log_1mp = jnp.maximum(jnp.log1p(-p), -100.0)
    return -(target * log_p + (1.0 - target) * log_1mp)


def distillation_loss(target: str, mean: jax.Array, std: jax.Array, labels: jax.Array) -> jax.Array:
    """st_rl's action distillation loss: the mean over samples of a per-sample distance.

    real: `||mu - a||_2`; mse_sum: `sum (mu - a)^2`; l1: `||mu - a||_1`;
    tanh: `2 BCE((mu + 1)/2, (a + 1)/2)` (mean over dims); scaled_tanh: the tanh loss times
    `||mu - a||_1 / dim`; max_log_prob: `-log pi(a)` under the student's Gaussian.
    """
    diff = mean - labels
    if target == "real":
        per_sample = jnp.sqrt(jnp.sum(jnp.square(diff), axis=-1))
    elif target == "mse_sum":
        per_sample = jnp.sum(jnp.square(diff), axis=-1)
    elif target == "l1":
        per_sample = jnp.sum(jnp.abs(diff), axis=-1)
    elif target in ("tanh", "scaled_tanh"):
        bce = _binary_cross_entropy((mean + 1.0) * 0.5, (labels + 1.0) * 0.5)
        per_sample = 2.0 * jnp.mean(bce, axis=-1)
        if target == "scaled_tanh":
            per_sample = per_sample * jnp.sum(jnp.abs(diff), axis=-1) / mean.shape[-1]
    elif target == "max_log_prob":
        per_sample = -gaussian_log_prob(labels, mean, std)
    else:
        raise ValueError(f"unknown distill_target {target!r}; valid choices: {list(DISTILL_TARGETS)}")
    return jnp.mean(per_sample)


@struct.dataclass
class TeacherRolloutState:
    """Per-env acting state of the teacher: who acts this episode, and its recurrent memory."""

    mask: jax.Array  # [N] bool: the teacher's label is executed in this env's current episode
    hidden: dict  # the teacher's hidden state ({} for a feed-forward teacher)


def draw_masks(keys: jax.Array, prob: jax.Array) -> jax.Array:
    """One "teacher acts" draw per env key: True with probability `prob`."""
    return jax.vmap(jax.random.uniform)(keys) < prob


def resample_mask(keys: jax.Array, mask: jax.Array, done: jax.Array, prob: jax.Array) -> jax.Array:
    """Redraw `mask` where an episode just ended (one key per env)."""
    return jnp.where(done, draw_masks(keys, prob), mask)


@dataclasses.dataclass(frozen=True, eq=False)
class TeacherGuidance:
    """Everything TPPO (and rsl_rl Distillation) adds to PPO's rollout and loss.

    `act_prob` and `loss_coef` map the iteration to a number; rsl_rl Distillation is the case
    of a teacher that never acts (`act_prob` constant 0) and `using_ppo=False`.
    """

    teacher: Teacher
    act_prob: Schedule
    loss_coef: Schedule
    target: str = "real"
    using_ppo: bool = True

    def init_rollout(self, keys: jax.Array) -> TeacherRolloutState:
        """The mask is drawn with the first iteration's probability (one key per env)."""
        mask = draw_masks(keys, self.act_prob(jnp.zeros((), jnp.int32)))
        return TeacherRolloutState(mask=mask, hidden=self.teacher.initial_hidden(keys.shape[0]))

    def act(
        self,
        state: TeacherState,
        rollout: TeacherRolloutState,
        obs: dict,
        student_actions: jax.Array,
        keys: jax.Array,
    ) -> tuple[jax.Array, jax.Array, dict]:
        """`(executed actions, teacher labels, teacher hidden')` for one step (one key per env)."""
        labels, hidden = self.teacher.label(state, obs, rollout.hidden, keys)
        executed = jnp.where(rollout.mask[:, None], labels, student_actions)
        return executed, labels, hidden

    def after_step(
        self, rollout: TeacherRolloutState, hidden: dict, done: jax.Array, prob: jax.Array, keys: jax.Array
    ) -> TeacherRolloutState:
        """Reset the teacher's memory and redraw the mask of finished episodes (one key per env)."""
        return TeacherRolloutState(
            mask=resample_mask(keys, rollout.mask, done, prob),
            hidden=self.teacher.reset_hidden(hidden, done),
        )
