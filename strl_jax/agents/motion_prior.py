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
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.agents.amp import (
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
from strl_jax.buffers.motion import MotionLibrary, sample_expert_amp_obs
from strl_jax.networks.discriminator import Discriminator, init_discriminator
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


@dataclasses.dataclass(frozen=True, eq=False)
class MotionPrior:
    """Everything AMP adds to a PPO/TPPO learner (a static part of it)."""

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

    @property
    def amp_dim(self) -> int:
        return 2 * self.frame_dim

    def init(self, key: jax.Array) -> AmpState:
        return AmpState(
            params=init_discriminator(self.discriminator, key, self.amp_dim),
            normalizers=init_amp_normalizers(self.amp_dim),
        )

    def init_replay(self, num_envs: int) -> PolicyReplay:
        return init_policy_replay(num_envs, self.replay_slots, self.amp_dim)

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


def make_motion_prior(env: Any, cfg: Any) -> MotionPrior:
    """Load the motion files and check them against the env's AMP frame (errors name both)."""
    from strl_jax.buffers.motion_files import load_motion_library
    from strl_jax.configs.loader import ConfigError
    from strl_jax.networks.discriminator import make_discriminator

    alg, disc = cfg.algorithm, cfg.policy.amp_discriminator
    shapes = env.observation_shapes()
    if AMP_GROUP not in shapes:
        raise ConfigError(f"{alg.class_name} needs the env's `{AMP_GROUP}` observation group")
    frame_dim = int(shapes[AMP_GROUP][-1])
    if not alg.amp_motion_files:
        raise ConfigError(f"{alg.class_name} needs algorithm.amp_motion_files (motion datasets or files)")
    try:
        motions = load_motion_library(list(alg.amp_motion_files), expected_frame_dim=frame_dim)
    except (OSError, ValueError) as err:
        raise ConfigError(f"algorithm.amp_motion_files: {err}") from None
    slots = max(1, -(-alg.amp_replay_buffer_size // env.num_envs))
    return MotionPrior(
        discriminator=make_discriminator(disc),
        motions=motions,
        dt=float(env.env.dt) * env.action_repeat,
        frame_dim=frame_dim,
        replay_slots=slots,
        style_reward_coef=disc.style_reward_coef,
        task_reward_lerp=disc.task_reward_lerp,
        grad_pen=disc.discriminator_grad_pen,
        loss_coefs=amp_loss_coefs(alg),
        normalizer_until=alg.amp_normalizer_until,
        shared_normalizer=alg.amp_normalizer == "shared",
    )
