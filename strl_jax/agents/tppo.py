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
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.agents.coefficient_schedules import SCHEDULES as SCHEDULE_NAMES
from strl_jax.agents.coefficient_schedules import Schedule, make_schedule
from strl_jax.agents.distillation import LOSS_TYPES
from strl_jax.agents.parts import EnvStep, InitContext, LossContext, Part, PartBuild, StepContext, StepOutput
from strl_jax.agents.teacher import Teacher, TeacherState
from strl_jax.collectives import env_keys
from strl_jax.errors import ConfigError
from strl_jax.networks.gaussian import gaussian_log_prob
from strl_jax.networks.latents import LatentSource, latent_source
from strl_jax.networks.policy import make_policy_model
from strl_jax.networks.policy_classes import POLICY_CLASSES

DISTILL_TARGETS = ("real", "mse_sum", "l1", "tanh", "scaled_tanh", "max_log_prob")
DISTILL_LATENT_TARGETS = ("real", "l1", "tanh", "scaled_tanh")  # st_rl's for latents


def _binary_cross_entropy(p: jax.Array, target: jax.Array) -> jax.Array:
    """Element-wise BCE with torch's clamp of each log at -100.

    Probabilities are clipped into [0, 1] first: the tanh targets assume tanh-squashed actions,
    and an unsquashed mean outside [-1, 1] would otherwise give NaN (torch raises instead).
    """
    p = jnp.clip(p, 0.0, 1.0)
    log_p = jnp.maximum(jnp.log(p), -100.0)
    log_1mp = jnp.maximum(jnp.log1p(-p), -100.0)
    return -(target * log_p + (1.0 - target) * log_1mp)


def safe_norm(x: jax.Array) -> jax.Array:
    """`||x||_2` over the last axis with torch.norm's gradient at 0 (zero, where sqrt's is NaN)."""
    squared = jnp.sum(jnp.square(x), axis=-1)
    positive = squared > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, squared, 1.0)), 0.0)


def distillation_loss(target: str, mean: jax.Array, std: jax.Array, labels: jax.Array) -> jax.Array:
    """st_rl's action distillation loss: the mean over samples of `distillation_distance`."""
    return jnp.mean(distillation_distance(target, mean, std, labels))


def distillation_distance(target: str, mean: jax.Array, std: jax.Array, labels: jax.Array) -> jax.Array:
    """The per-sample distance of st_rl's distillation loss (leading axes kept).

    real: `||mu - a||_2`; mse_sum: `sum (mu - a)^2`; l1: `||mu - a||_1`;
    tanh: `2 BCE((mu + 1)/2, (a + 1)/2)` (mean over dims); scaled_tanh: the tanh loss times
    `||mu - a||_1 / dim`; max_log_prob: `-log pi(a)` under the student's Gaussian.
    """
    diff = mean - labels
    if target == "real":
        per_sample = safe_norm(diff)
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
    return per_sample


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


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class TeacherPart(Part):
    """TPPO's teacher as a learner part (rsl_rl Distillation's too, with `acts=False`).

    `act_prob` and `loss_coef` map the iteration to a number. `loss_coef=None` adds no loss term
    (Distillation's behaviour-cloning update reads the stored labels itself). A teacher that never
    acts (`acts=False`) keeps its mask off and logs no act probability or fraction.
    """

    step_keys: ClassVar[int] = 2  # labels (when sampled) and mask redraws

    teacher: Teacher
    act_prob: Schedule
    loss_coef: Schedule | None = None
    target: str = "real"
    acts: bool = True
    # latent distillation: (student latent, teacher latent) pairs, their weight and distance
    latents: tuple[tuple[LatentSource, LatentSource], ...] = ()
    latent_coef: float = 1.0
    latent_target: str = "real"

    @property
    def sections(self) -> dict[str, str]:  # type: ignore[override]
        out = {
            "distillation": "Loss",
            "teacher_act_prob": "Train",
            "teacher_act_fraction": "Train",
            "action_error": "Policy",
        }
        return out | {f"distill_latent_{s.name}": "Loss" for s, _ in self.latents}

    def init(self, key: jax.Array, ctx: InitContext):
        """The mask is drawn with the first iteration's probability (one key per env)."""
        keys = env_keys(key, ctx.env_ids)
        mask = draw_masks(keys, self.act_prob(jnp.zeros((), jnp.int32)))
        rollout = TeacherRolloutState(mask=mask, hidden=self.teacher.initial_hidden(ctx.num_envs))
        return self.teacher.initial_state, rollout

    def act(self, train: TeacherState, rollout: TeacherRolloutState, ctx: StepContext, actions, keys):
        """Label every step; execute the label in envs whose mask is set."""
        label_keys, mask_keys = keys
        teacher_latents = tuple(t for _, t in self.latents)
        labels, latents, hidden = self.teacher.label(
            train, ctx.obs, rollout.hidden, label_keys, teacher_latents
        )
        executed = jnp.where(rollout.mask[:, None], labels, actions)
        return executed, (labels, latents, hidden, mask_keys)

    def on_step(self, train, rollout: TeacherRolloutState, ctx: StepContext, env: EnvStep, reward, acted):
        """Reset the teacher's memory and redraw the mask of finished episodes."""
        labels, latents, hidden, mask_keys = acted
        prob = self.act_prob(ctx.iteration)
        new_rollout = TeacherRolloutState(
            mask=resample_mask(mask_keys, rollout.mask, env.done, prob),
            hidden=self.teacher.reset_hidden(hidden, env.done),
        )
        # `action_error`: mean L2 distance of the student's action mean to the label, before the update.
        sums = {"action_error": jnp.linalg.norm(ctx.mean - labels, axis=-1).sum()}
        if self.acts:
            sums = {"teacher_act_fraction": rollout.mask.sum(), **sums}
        fields = {"action_labels": labels} | ({"latent_labels": latents} if latents else {})
        return StepOutput(reward=reward, rollout=new_rollout, fields=fields, sums=sums)

    def losses(self, params, train, ctx: LossContext, inputs):
        if self.loss_coef is None:
            return {}, {}, {}
        fields = ctx.batch.parts[self.name]
        loss = distillation_loss(self.target, ctx.mean, ctx.std, fields["action_labels"])
        losses = {"distillation_loss": loss}
        coefs = {"distillation_loss": self.loss_coef(ctx.iteration)}
        metrics = {"distillation": loss}
        for student, teacher in self.latents:
            latent = student.read(ctx.estimates, ctx.batch.obs["policy"])
            name = f"distill_latent_{student.name}"
            losses[name] = metrics[name] = distillation_loss(
                self.latent_target, latent, None, fields["latent_labels"][teacher.name]
            )
            coefs[name] = self.latent_coef
        return losses, coefs, metrics

    def iteration_metrics(self, train, sums: dict, num_samples, iteration):
        metrics = super().iteration_metrics(train, sums, num_samples, iteration)
        if self.acts:
            metrics["teacher_act_prob"] = self.act_prob(iteration)
        return metrics


@dataclasses.dataclass(frozen=True)
class TeacherSettings:
    """The teacher's settings, from st_rl's flat TPPO options in `algorithm` (the checkpoint is
    `algorithm.teacher_policy`, read by the learner's builder)."""

    act_prob: Schedule  # teacher_act_prob over update_times_scale
    loss_coef: Schedule  # distillation_loss_coef over update_times_scale
    target: str  # distill_target
    latent_mapping: dict[str, str]  # distill_latent_obs_component_mapping
    latent_coef: float
    latent_target: str


def teacher_settings(cfg: Any) -> TeacherSettings:
    """TPPO / Distillation settings, checked. The teacher checkpoint itself is checked when it is
    loaded."""
    alg = cfg.algorithm
    for key, value in (
        ("teacher_act_prob", alg.teacher_act_prob),
        ("distillation_loss_coef", alg.distillation_loss_coef),
    ):
        if isinstance(value, str) and value not in SCHEDULE_NAMES:
            raise ConfigError(
                f"unknown algorithm.{key} {value!r}; valid choices: a number or one of {list(SCHEDULE_NAMES)}"
            )
    if not isinstance(alg.teacher_act_prob, str) and not 0.0 <= alg.teacher_act_prob <= 1.0:
        raise ConfigError(f"algorithm.teacher_act_prob must lie in [0, 1], got {alg.teacher_act_prob}")
    if alg.update_times_scale < 1:
        raise ConfigError(
            f"algorithm.update_times_scale must be at least 1 (iterations), got {alg.update_times_scale}"
        )
    choices = {
        "algorithm.distill_target": (alg.distill_target, list(DISTILL_TARGETS)),
        "algorithm.distill_latent_target": (alg.distill_latent_target, list(DISTILL_LATENT_TARGETS)),
        "algorithm.loss_type": (alg.loss_type, list(LOSS_TYPES)),
        "algorithm.teacher_policy.class_name": (
            alg.teacher_policy.class_name,
            list(POLICY_CLASSES),
        ),
    }
    for key, (value, valid) in choices.items():
        if value not in valid:
            raise ConfigError(f"unknown {key} {value!r}; valid choices: {valid}")
    mapping = alg.distill_latent_obs_component_mapping
    if mapping:
        bad = [k for k, v in mapping.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise ConfigError(
                "algorithm.distill_latent_obs_component_mapping maps student latent names to teacher "
                f"latent names (strings); got {mapping!r}"
            )
    if alg.gradient_length < 1:
        raise ConfigError(f"algorithm.gradient_length must be at least 1, got {alg.gradient_length}")
    return TeacherSettings(
        act_prob=make_schedule(alg.teacher_act_prob, alg.update_times_scale),
        loss_coef=make_schedule(alg.distillation_loss_coef, alg.update_times_scale),
        target=alg.distill_target,
        latent_mapping=dict(mapping or {}),
        latent_coef=alg.distill_latent_coef,
        latent_target=alg.distill_latent_target,
    )


def build_teacher(b: PartBuild) -> TeacherPart:
    """TPPO's teacher (acts with `teacher_act_prob`, adds `distillation_loss`), or for the
    behaviour-cloning update a teacher that only labels."""
    settings: TeacherSettings = b.settings
    env = b.env
    teacher = b.load_policy(b.cfg, env.observation_shapes(), env.action_size)
    if b.algorithm.update == "behavior_cloning":
        return TeacherPart(name=b.name, teacher=teacher, act_prob=make_schedule(0.0, 1.0), acts=False)
    return TeacherPart(
        name=b.name,
        teacher=teacher,
        act_prob=settings.act_prob,
        loss_coef=settings.loss_coef,
        target=settings.target,
        latents=latent_pairs(b, teacher),
        latent_coef=settings.latent_coef,
        latent_target=settings.latent_target,
    )


def latent_pairs(b: PartBuild, teacher: Teacher) -> tuple:
    """`distill_latent_obs_component_mapping` resolved: (student latent, teacher latent) pairs of
    equal sizes (st_rl: `{student component: teacher component}`)."""
    env, cfg = b.env, b.cfg
    student_model = make_policy_model(env.action_size, cfg.policy, env.components, env.component_shapes)
    pairs = []
    for student_name, teacher_name in b.settings.latent_mapping.items():
        student = latent_source(student_name, student_model, env.components.get("policy"), "student")
        source = latent_source(teacher_name, teacher.actor.model, teacher.input_layout, "teacher")
        if student.size != source.size:
            raise ConfigError(
                f"algorithm.distill_latent_obs_component_mapping: the student's {student_name!r} has "
                f"{student.size} entries, the teacher's {teacher_name!r} {source.size}"
            )
        pairs.append((student, source))
    return tuple(pairs)
