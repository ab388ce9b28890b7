"""APPO / ATPPO: what an adversarial motion prior adds to PPO (or TPPO), as parts of the learner.

- Rollout: the policy's AMP observation of each step, `concat(s_t, s_t+1)` from the env's `amp`
  group (the pre-reset frame for finished episodes), is stored raw; so is one expert AMP
  observation per env and step drawn from the motion library (st_rl's `ref_motion`, here drawn
  with per-env keys). The reward becomes `(1 - lerp) * style + lerp * task`, the style reward
  scored by the current discriminator on the policy observation normalised with the current
  statistics.
- Replay: each env keeps a ring of its last policy AMP observations (`PolicyReplay`, sharded
  with the envs); every minibatch sample draws one from its env's ring, so the discriminator's
  policy batch mixes the newest rollout with older ones and does not depend on the device count.
- Update: the discriminator's LSGAN terms and gradient penalty (and `mimic_loss`,
  `dagger_loss`) join PPO's loss; its params are optimised together with the policy's by the
  same optimiser, as in st_rl where the discriminator is part of the actor-critic module.
- After the update the AMP normaliser(s) take the rollout's raw policy and expert batches.
  `shared` (the default, as AMP_for_hardware): one set of statistics over both, so the
  discriminator sees every difference between them. `separate` (st_rl): each side standardised
  by its own statistics, which removes any per-feature offset or scale between policy and expert
  (a policy standing still has the expert's normalised forward speed) from what it can see.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.agents.amp import (
    LOSS_LOG_NAMES,
    AmpNormalizers,
    amp_loss_coefs,
    dagger_loss,
    discriminator_loss_terms,
    init_amp_normalizers,
    mimic_loss,
    normalize_amp_obs,
    predict_style_reward,
    update_amp_normalizers,
)
from strl_jax.agents.parts import (
    EnvStep,
    InitContext,
    LossContext,
    Part,
    PartBuild,
    StepContext,
    StepOutput,
    UpdateContext,
    sample_keys,
)
from strl_jax.buffers.motion import MotionLibrary, sample_expert_amp_obs
from strl_jax.buffers.motion_files import load_motion_library
from strl_jax.collectives import env_keys
from strl_jax.envs.amp_obs import resolve_components
from strl_jax.errors import ConfigError
from strl_jax.networks.discriminator import Discriminator, init_discriminator, make_discriminator
from strl_jax.networks.mlp import ACTIVATIONS
from strl_jax.networks.normalizer import normalize, update_normalizer

AMP_GROUP = "amp"


@struct.dataclass
class AmpState:
    """Replicated AMP learner state: discriminator params and the two AMP normalisers."""

    params: Any
    normalizers: AmpNormalizers


@struct.dataclass
class PolicyReplay:
    """Per-env rings of raw policy AMP observations: `data[N, slots, D]`, all envs in step."""

    data: jax.Array
    position: jax.Array  # [N] int32 next slot written
    size: jax.Array  # [N] int32 filled slots


def init_policy_replay(num_envs: int, slots: int, dim: int) -> PolicyReplay:
    return PolicyReplay(
        data=jnp.zeros((num_envs, slots, dim), jnp.float32),
        position=jnp.zeros((num_envs,), jnp.int32),
        size=jnp.zeros((num_envs,), jnp.int32),
    )


def replay_add(replay: PolicyReplay, amp_obs: jax.Array) -> PolicyReplay:
    """Append a rollout's `[T, N, D]` policy AMP observations to each env's ring."""
    steps = amp_obs.shape[0]
    slots = replay.data.shape[1]
    kept = amp_obs[-slots:]  # a rollout longer than the ring keeps its newest steps
    first = replay.position + (steps - kept.shape[0])
    rows = (first[:, None] + jnp.arange(kept.shape[0], dtype=jnp.int32)[None, :]) % slots  # [N, k]
    data = jax.vmap(lambda d, r, x: d.at[r].set(x))(replay.data, rows, jnp.swapaxes(kept, 0, 1))
    return PolicyReplay(
        data=data,
        position=(replay.position + steps) % slots,
        size=jnp.minimum(replay.size + steps, slots),
    )


def replay_draw(replay: PolicyReplay, keys: jax.Array, env: jax.Array) -> jax.Array:
    """One stored observation from the ring of `env[i]` per key (uniform over its filled slots)."""

    def draw(key, e):
        slot = jax.random.randint(key, (), 0, jnp.maximum(replay.size[e], 1))
        return replay.data[e, slot]

    return jax.vmap(draw)(keys, env)


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class MotionPriorPart(Part):
    """Everything AMP adds to a PPO/TPPO learner, as a learner part (train state `AmpState`,
    rollout state `PolicyReplay`). `labels_from` names the part whose `action_labels` the
    `dagger_loss` pulls towards (ATPPO: the teacher); without it, the executed actions."""

    obs_groups: ClassVar[tuple[str, ...]] = (AMP_GROUP,)  # read by this part only, never normalised
    sections: ClassVar[dict[str, str]] = {
        **{name: "Loss" for name in LOSS_LOG_NAMES.values()},
        "discriminator_accuracy_expert": "Loss",
        "discriminator_accuracy_policy": "Loss",
        "discriminator_expert_score": "Loss",
        "discriminator_policy_score": "Loss",
        "mean_style_reward": "Train",
        "mean_task_reward": "Train",
    }

    discriminator: Discriminator
    motions: MotionLibrary  # device arrays, compiled into the program as constants
    dt: float  # seconds between the two frames of an AMP observation (env dt x action_repeat)
    frame_dim: int
    replay_slots: int  # per env
    style_reward_coef: float
    task_reward_lerp: float
    grad_pen: float
    loss_coefs: dict[str, float]
    normalizer_until: float | None
    shared_normalizer: bool = True
    labels_from: str | None = None

    @property
    def amp_dim(self) -> int:
        return 2 * self.frame_dim

    def init(self, key: jax.Array, ctx: InitContext) -> tuple[AmpState, PolicyReplay]:
        state = AmpState(
            params=init_discriminator(self.discriminator, key, self.amp_dim),
            normalizers=init_amp_normalizers(self.amp_dim),
        )
        return state, init_policy_replay(ctx.num_envs, self.replay_slots, self.amp_dim)

    def trainable(self, train: AmpState) -> Any:
        """One optimiser and one gradient clip for policy and discriminator, as in st_rl where the
        discriminator is part of the actor-critic module."""
        return train.params

    def with_trainable(self, train: AmpState, params: Any) -> AmpState:
        return train.replace(params=params)

    def disc_apply(self, params: Any, amp_obs: jax.Array) -> jax.Array:
        return self.discriminator.apply(params, amp_obs)

    # ---- rollout ---------------------------------------------------------------------------
    def step(
        self, state: AmpState, obs: dict, final_obs: dict, task_reward: jax.Array, keys: jax.Array
    ) -> tuple[jax.Array, dict]:
        """`(mixed reward [N], {policy, expert AMP obs [N, D], style [N]})` for one env step."""
        policy_amp = jnp.concatenate([obs[AMP_GROUP], final_obs[AMP_GROUP]], axis=-1)
        expert_amp = jax.vmap(lambda k: sample_expert_amp_obs(self.motions, k, 1, self.dt)[0])(keys)
        mixed, style = predict_style_reward(
            self.disc_apply,
            state.params,
            state.normalizers,
            policy_amp,
            task_reward,
            self.style_reward_coef,
            self.task_reward_lerp,
        )
        return mixed, {"policy": policy_amp, "expert": expert_amp, "style": style}

    def on_step(self, train: AmpState, rollout, ctx: StepContext, env: EnvStep, reward, acted) -> StepOutput:
        """Store the step's policy AMP observation and an expert one; reward the style."""
        keys = env_keys(jax.random.fold_in(ctx.step_key, 1), ctx.env_ids)
        mixed, amp = self.step(train, ctx.obs, env.final_obs, reward, keys)
        return StepOutput(
            reward=mixed,
            rollout=rollout,  # the replay takes the whole rollout in `before_update`
            fields={"policy": amp["policy"], "expert": amp["expert"]},
            sums={"mean_style_reward": amp["style"].sum(), "mean_task_reward": env.reward.sum()},
        )

    def before_update(self, train, rollout: PolicyReplay, fields: dict, ctx: UpdateContext) -> PolicyReplay:
        """The rollout joins the replay first: the discriminator sees the newest behaviour too."""
        return replay_add(rollout, fields["policy"])

    def minibatch_inputs(self, train, rollout: PolicyReplay, idx, key, ctx: UpdateContext) -> jax.Array:
        """One policy AMP observation per sample of the minibatch `idx`, from the ring of the
        sample's env, keyed by (global env, step): `[T', B', D]` like the minibatch."""
        keys, env = sample_keys(key, idx, ctx)
        draws = replay_draw(rollout, keys, env.reshape(-1))
        return draws.reshape(env.shape + draws.shape[-1:])

    def losses(self, params, train: AmpState, ctx: LossContext, inputs: jax.Array):
        fields = ctx.batch.parts[self.name]
        labels = (
            ctx.batch.actions
            if self.labels_from is None
            else ctx.batch.parts[self.labels_from]["action_labels"]
        )
        losses, coefs, metrics = self.loss_terms(
            params, train.normalizers, inputs, fields["expert"], fields["policy"], ctx.mean, labels
        )
        return losses, coefs, {**{LOSS_LOG_NAMES[k]: v for k, v in losses.items()}, **metrics}

    def after_update(self, train: AmpState, fields: dict, ctx: UpdateContext) -> AmpState:
        return self.update_normalizers(train, fields["policy"], fields["expert"], ctx.axis_name)

    # ---- update ------------------------------------------------------------------------------
    def loss_terms(
        self,
        disc_params: Any,
        normalizers: AmpNormalizers,
        policy_amp: jax.Array,
        expert_amp: jax.Array,
        rollout_amp: jax.Array,
        mean: jax.Array,
        action_labels: jax.Array,
    ) -> tuple[dict, dict, dict]:
        """`(losses, coefficients, metrics)` of one minibatch (any leading shape, flattened).

        `policy_amp` are replay draws, `expert_amp` the motion samples stored with the steps,
        `rollout_amp` the steps' own policy AMP observations (for `mimic_loss`).
        """
        flat = lambda x: x.reshape(-1, x.shape[-1])  # noqa: E731
        if self.shared_normalizer:
            policy_n, expert_n = (
                normalize(normalizers.policy, flat(policy_amp)),
                normalize(normalizers.policy, flat(expert_amp)),
            )
        else:
            policy_n, expert_n = normalize_amp_obs(normalizers, flat(policy_amp), flat(expert_amp))
        losses, metrics = discriminator_loss_terms(
            self.disc_apply, disc_params, policy_n, expert_n, self.grad_pen
        )
        coefs = {k: v for k, v in self.loss_coefs.items() if k in losses}
        if self.loss_coefs["mimic_loss"]:
            rollout_n = normalize(normalizers.policy, flat(rollout_amp))
            losses["mimic_loss"] = mimic_loss(rollout_n, expert_n)
            coefs["mimic_loss"] = self.loss_coefs["mimic_loss"]
        if self.loss_coefs["dagger_loss"]:
            losses["dagger_loss"] = dagger_loss(flat(mean), flat(action_labels))
            coefs["dagger_loss"] = self.loss_coefs["dagger_loss"]
        return losses, coefs, metrics

    def update_normalizers(
        self, state: AmpState, policy_amp: jax.Array, expert_amp: jax.Array, axis_name: str | None
    ) -> AmpState:
        """Fold the rollout's raw policy and expert AMP observations into their statistics."""
        flat = lambda x: x.reshape(-1, x.shape[-1])  # noqa: E731
        if self.shared_normalizer:  # `policy` holds the shared statistics; `expert` stays unused
            both = jnp.concatenate([flat(policy_amp), flat(expert_amp)])
            shared = update_normalizer(state.normalizers.policy, both, self.normalizer_until, axis_name)
            return state.replace(normalizers=state.normalizers.replace(policy=shared))
        normalizers = update_amp_normalizers(
            state.normalizers, flat(policy_amp), flat(expert_amp), self.normalizer_until, axis_name
        )
        return state.replace(normalizers=normalizers)


def amp_settings(cfg: Any) -> AmpSettings:
    """AMP settings, checked (cheap checks only; motion files are read when the part is built)."""
    if not cfg.algorithm.amp_motion_files:
        raise ConfigError(
            f"algorithm.class_name {cfg.algorithm.class_name} needs algorithm.amp_motion_files: motion "
            "dataset folders (python -m strl_jax.collect) or motion files (AMP_for_hardware JSON, pickles)"
        )
    disc = cfg.policy.amp_discriminator
    if disc.activation.lower() not in ACTIVATIONS:
        raise ConfigError(
            f"unknown policy.amp_discriminator.activation {disc.activation!r}; "
            f"valid choices: {sorted(ACTIVATIONS)}"
        )
    if not disc.hidden_dims or any(w < 1 for w in disc.hidden_dims):
        raise ConfigError(
            f"policy.amp_discriminator.hidden_dims must be a non-empty list of positive widths, got "
            f"{list(disc.hidden_dims)}"
        )
    if not 0.0 <= disc.task_reward_lerp <= 1.0:
        raise ConfigError(
            f"policy.amp_discriminator.task_reward_lerp must lie in [0, 1], got {disc.task_reward_lerp}"
        )
    for key in ("style_reward_coef", "discriminator_grad_pen"):
        if getattr(disc, key) < 0:
            raise ConfigError(f"policy.amp_discriminator.{key} must be >= 0, got {getattr(disc, key)}")
    if cfg.algorithm.amp_normalizer not in ("shared", "separate"):
        raise ConfigError(
            f"unknown algorithm.amp_normalizer {cfg.algorithm.amp_normalizer!r}; "
            "valid choices: ['shared', 'separate']"
        )
    if cfg.algorithm.amp_replay_buffer_size < 1:
        raise ConfigError(
            f"algorithm.amp_replay_buffer_size must be at least 1, got {cfg.algorithm.amp_replay_buffer_size}"
        )
    if cfg.env.amp_obs_components is not None:
        try:
            resolve_components(cfg.env.task, cfg.env.amp_obs_components)
        except ValueError as err:
            raise ConfigError(f"env.amp_obs_components: {err}") from None
    alg = cfg.algorithm
    return AmpSettings(
        motion_files=tuple(alg.amp_motion_files),
        replay_buffer_size=alg.amp_replay_buffer_size,
        normalizer_until=alg.amp_normalizer_until,
        shared_normalizer=alg.amp_normalizer == "shared",
        loss_coefs=amp_loss_coefs(alg),
        discriminator=cfg.policy.amp_discriminator,
    )


@dataclasses.dataclass(frozen=True)
class AmpSettings:
    """AMP's settings, from st_rl's flat `algorithm.amp_*` options, the discriminator loss weights
    and `policy.amp_discriminator`."""

    motion_files: tuple[str, ...]
    replay_buffer_size: int
    normalizer_until: float | None
    shared_normalizer: bool
    loss_coefs: Any  # amp_loss_coefs
    discriminator: Any  # configs.schema's AmpDiscriminatorConfig


def build_motion_prior(b: PartBuild) -> MotionPriorPart:
    """Load the motion files and check them against the env's AMP frame (errors name both); the
    `dagger_loss` follows the teacher's labels if the algorithm has a teacher (ATPPO)."""
    env, settings = b.env, b.settings
    shapes = env.observation_shapes()
    class_name = b.cfg.algorithm.class_name
    if AMP_GROUP not in shapes:
        raise ConfigError(f"{class_name} needs the env's `{AMP_GROUP}` observation group")
    frame_dim = int(shapes[AMP_GROUP][-1])
    try:
        motions = load_motion_library(list(settings.motion_files), expected_frame_dim=frame_dim)
    except (OSError, ValueError) as err:
        raise ConfigError(f"algorithm.amp_motion_files: {err}") from None
    disc = settings.discriminator
    return MotionPriorPart(
        name=b.name,
        labels_from="teacher" if "teacher" in b.algorithm.parts else None,
        discriminator=make_discriminator(disc),
        motions=motions,
        dt=env.dt,
        frame_dim=frame_dim,
        replay_slots=max(1, -(-settings.replay_buffer_size // env.num_envs)),
        style_reward_coef=disc.style_reward_coef,
        task_reward_lerp=disc.task_reward_lerp,
        grad_pen=disc.discriminator_grad_pen,
        loss_coefs=settings.loss_coefs,
        normalizer_until=settings.normalizer_until,
        shared_normalizer=settings.shared_normalizer,
    )
