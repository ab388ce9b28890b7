"""Two-stage training's parts (st_rl's TwoStageRunner): the demonstration dataset the first
iterations replay (`DatasetPart`: where each virtual env is in it, and pretraining's pull of the
action mean towards its labels), and that pull carried past the switch to RL (`DemonstrationPart`).

The replayed iterations themselves are a rollout source (`train_loops.dataset_rollout`); the host
loop's stages (`runners.stages`) decide which iterations replay the dataset.

Pretraining (`runner.pretrain_iterations`) fits the policy to a dataset, but the first RL updates
can undo it: on hopper and walker2d the pretrained policy lost its head start within ten PPO
iterations, whatever the learning rate, entropy bonus or initial std. DAPG (Rajeswaran et al.,
"Learning Complex Dexterous Manipulation with Deep Reinforcement Learning and Demonstrations",
RSS 2018, https://arxiv.org/abs/1709.10087) keeps a demonstration term in the RL objective with a
weight that decays as RL takes over; this part does that with the pretraining's own imitation
term. Each minibatch sample draws one dataset step (keyed by its global env and step, so the draws
do not depend on the device count), and the loss adds `rl_imitation_coef * (1 - k / K)` times
the distance (`algorithm.distill_target`) between the policy's action mean on the drawn
observations and the dataset's labels (`imitation_labels`: its actions, or its mean actions),
`k` the RL iterations done, `K` `rl_imitation_iterations`; 0 during pretraining (whose loss
holds the term already) and after `K`.

With `rl_imitation_filter: advantage` a drawn step counts only where the demonstration did better
than the policy being trained would from the same state: where the step's discounted return in
the dataset (rewards times `algorithm.reward_scale`, `algorithm.gamma`; at a time-out the last
state's value stands for what follows) exceeds the critic's value of its state. This is the
binary advantage filter of self-imitation learning (Oh et al., "Self-Imitation Learning", ICML
2018, https://arxiv.org/abs/1806.05635: imitate where `(R - V)+ > 0`) and of CRR (Wang et al.
2020, https://arxiv.org/abs/2006.15134). A policy that has overtaken its demonstrations stops
being pulled back to them, and one that falls behind them is pulled harder; the term is the
mean over all drawn steps, so its size follows the share kept (logged as `rl_imitation_kept`;
`rl_imitation` is the distance over all of them, kept or not).

The comparison is only as good as the critic, and PPO's critic lags behind returns that grow: on
halfcheetah it valued the dataset's states far below their returns while the policy already
earned more per step than the demonstrations, so every step stayed kept and the pull held the
policy at the demonstrator's level. `rl_imitation_filter: reward` asks the rollouts instead: the
pull acts in an RL iteration only while that iteration's rollout (every env on every device, with
the policy's exploration noise) is behind the dataset (recorded with the demonstrator's noise
where `collect --sample_actions` made it) in env reward per step (unscaled) or in terminations
per step (episodes ended by the task, not by the time limit). Reward per step alone would release
a hopper that runs fast and falls: its falls are what its episodes lose. The gate compares
measured quantities, no estimate; it releases the pull whole once the policy does as well as its
demonstrations on both counts, and takes it up again if it falls back.

The dataset's observation groups and actions are device arrays compiled into the update as
constants, like AMP's motion library.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

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
from strl_jax.agents.tppo import distillation_distance, distillation_loss
from strl_jax.buffers.rollout_dataset import (
    DatasetArrays,
    init_cursor,
    load_dataset_arrays,
    pretrain_settings,
)
from strl_jax.errors import ConfigError
from strl_jax.networks.gaussian import GAUSSIAN, TANH_GAUSSIAN

# The part holding the dataset's replay position; its name keys the replayed steps' labels.
DATASET_PART = "dataset"


@dataclasses.dataclass(frozen=True, eq=False)
class DatasetPart(Part):
    """The dataset replayed in the first iterations: its rollout state is where each virtual env is
    in it (`buffers.rollout_dataset.DatasetCursor`), a replayed step stores its imitation label,
    and the loss adds `imitation_loss_coef` times the distance (`algorithm.distill_target`) between
    the action mean and those labels; in the env's iterations it does nothing."""

    sections: ClassVar[dict[str, str]] = {
        "imitation": "Loss",
        "dataset_used_up": "Perf",
        "dataset_passes": "Perf",
    }
    draws_at_init: ClassVar[bool] = False  # the replay position is not drawn

    coef: float  # imitation_loss_coef (0: no imitation term)
    target: str  # algorithm.distill_target

    def init(self, key: jax.Array | None, ctx: InitContext) -> tuple[None, Any]:
        return None, init_cursor(ctx.env_ids)

    def on_replayed_step(self, labels: jax.Array) -> dict:
        return {"action_labels": labels} if self.coef else {}

    def losses(self, params: Any, train: Any, ctx: LossContext, inputs: Any):
        fields = ctx.batch.parts[self.name]
        if "action_labels" not in fields:  # an iteration in the env
            return {}, {}, {}
        n = ctx.originals
        imitation = distillation_loss(self.target, ctx.mean[:, :n], ctx.std[:, :n], fields["action_labels"])
        return {"imitation_loss": imitation}, {"imitation_loss": self.coef}, {"imitation": imitation}


def replays_dataset(cfg: Any) -> bool:
    """Whether a run's first iterations replay a dataset (`runner.pretrain_iterations`)."""
    return cfg.runner.pretrain_iterations > 0


def dataset_settings(cfg: Any) -> dict[str, Any]:
    """`runner.pretrain_dataset` read and checked, with the policy it replays actions for: their
    log-probabilities are those of the dataset's actions, which a tanh-squashed policy would need
    as pre-tanh samples."""
    if cfg.policy.distribution != GAUSSIAN:
        raise ConfigError(
            f"runner.pretrain_iterations replays dataset actions, whose pre-tanh samples "
            f"policy.distribution={TANH_GAUSSIAN} would need; use policy.distribution=gaussian for "
            "pretraining"
        )
    return pretrain_settings(cfg.runner.pretrain_dataset)


def build_dataset(b: PartBuild) -> DatasetPart:
    """The replayed dataset's part: its imitation weight and distance."""
    return DatasetPart(
        name=b.name, coef=b.settings.imitation_loss_coef, target=b.cfg.algorithm.distill_target
    )


@dataclasses.dataclass(frozen=True, eq=False)
class DemonstrationPart(Part):
    """The decaying imitation term of the RL iterations after pretraining (no state)."""

    sections: ClassVar[dict[str, str]] = {
        "rl_imitation": "Loss",
        "rl_imitation_weight": "Loss",
        "rl_imitation_kept": "Loss",
    }

    obs: dict  # observation group -> [S, ...], the dataset's raw observations
    labels: jax.Array  # [S, A] the imitation targets (`imitation_labels`)
    coef: float  # the weight at the first RL iteration
    iterations: int  # RL iterations over which the weight falls to 0
    first_rl_iteration: int  # runner.pretrain_iterations
    target: str  # algorithm.distill_target
    # `rl_imitation_filter: advantage`: per step, its discounted return to its trajectory's end,
    # the discount of the value standing in after a time-out (0 after a termination), and the
    # index of its trajectory's last step; None: every drawn step counts
    returns: jax.Array | None = None  # [S]
    tail_discount: jax.Array | None = None  # [S]
    last_step: jax.Array | None = None  # [S] int32
    # `rl_imitation_filter: reward`: the dataset's mean reward and terminations per step; None: no gate
    dataset_reward: float | None = None
    dataset_terminations: float | None = None

    def init(self, key: jax.Array, ctx: InitContext) -> tuple[None, dict | None]:
        """With the reward gate, the rollout state is the last rollout's reward and terminations
        per step, one copy per env (rollout states are sharded over the env axis)."""
        if self.dataset_reward is None:
            return None, None
        zeros = jnp.zeros((ctx.num_envs,), jnp.float32)
        return None, {"reward": zeros, "terminations": zeros}

    def on_step(
        self, train: Any, rollout: Any, ctx: StepContext, env: EnvStep, reward: jax.Array, acted: Any
    ) -> StepOutput:
        fields = {}
        if self.dataset_reward is not None:
            fields = {"env_reward": env.reward, "terminated": env.terminated.astype(jnp.float32)}
        return StepOutput(reward=reward, rollout=rollout, fields=fields)

    def before_update(self, train: Any, rollout: Any, fields: dict, ctx: UpdateContext) -> Any:
        """The reward gate's inputs: the whole rollout's env reward and terminations per step, all
        devices (unchanged after a pretraining iteration, whose replayed steps store no fields)."""
        if "env_reward" not in fields:
            return rollout
        per_step = {"reward": jnp.mean(fields["env_reward"]), "terminations": jnp.mean(fields["terminated"])}
        if ctx.axis_name is not None:
            per_step = jax.lax.pmean(per_step, ctx.axis_name)
        return {k: jnp.full((ctx.num_envs,), v, jnp.float32) for k, v in per_step.items()}

    def weight(self, iteration: jax.Array) -> jax.Array:
        """`coef * (1 - k / K)` for the `k`-th RL iteration (`k < K`), else 0."""
        k = (jnp.asarray(iteration) - self.first_rl_iteration).astype(jnp.float32)
        decay = jnp.clip(1.0 - k / self.iterations, 0.0, 1.0)
        return jnp.where(k >= 0, self.coef * decay, 0.0)

    def minibatch_inputs(self, train: Any, rollout: Any, idx: jax.Array, key: jax.Array, ctx: UpdateContext):
        """One dataset step per minibatch sample, `[T', B', ...]`: its raw observation groups and
        imitation label, and with the filter its return, tail discount and trajectory's last observations."""
        keys, env = sample_keys(key, idx, ctx)
        steps = jax.vmap(lambda k: jax.random.randint(k, (), 0, self.labels.shape[0]))(keys)
        take = lambda x, at=steps: x[at].reshape(env.shape + x.shape[1:])  # noqa: E731
        inputs = {"obs": {k: take(v) for k, v in self.obs.items()}, "labels": take(self.labels)}
        if self.dataset_reward is not None:
            inputs["rollout"] = {k: v[0] for k, v in rollout.items()}
        if self.returns is not None:
            inputs["returns"] = take(self.returns)
            inputs["tail_discount"] = take(self.tail_discount)
            inputs["last_obs"] = {k: take(v, self.last_step[steps]) for k, v in self.obs.items()}
        return inputs

    def kept(self, ctx: LossContext, inputs: dict) -> jax.Array:
        """1 where the drawn step counts, else 0: with the advantage filter where its return beats
        the critic's value of its state, with the reward gate everywhere while the rollout earns
        less or falls more per step than the dataset (all 1 without a filter); no gradient flows
        through it."""
        shape = inputs["labels"].shape[:-1]
        if self.dataset_reward is not None:
            rollout = inputs["rollout"]
            behind = (rollout["reward"] < self.dataset_reward) | (
                rollout["terminations"] > self.dataset_terminations
            )
            return jnp.broadcast_to(behind.astype(jnp.float32), shape)
        if self.returns is None:
            return jnp.ones(shape)
        value = lambda obs: ctx.critic_value(ctx.normalize(obs))  # noqa: E731
        ret = inputs["returns"] + inputs["tail_discount"] * value(inputs["last_obs"])
        return jax.lax.stop_gradient((ret > value(inputs["obs"])).astype(jnp.float32))

    def losses(self, params: Any, train: Any, ctx: LossContext, inputs: Any):
        mean = ctx.policy_mean(ctx.normalize(inputs["obs"]))
        # the policy's std does not depend on the observation (scalar or log std parameters)
        std = jnp.broadcast_to(ctx.std[:, :1], mean.shape)
        kept = self.kept(ctx, inputs)
        distance = distillation_distance(self.target, mean, std, inputs["labels"])
        weight = self.weight(ctx.iteration)
        return (
            {"rl_imitation_loss": jnp.mean(kept * distance)},
            {"rl_imitation_loss": weight},
            {
                "rl_imitation": jnp.mean(distance),
                "rl_imitation_weight": weight,
                "rl_imitation_kept": jnp.mean(kept),
            },
        )


def dataset_returns(
    arrays: DatasetArrays, gamma: float, reward_scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per dataset step: the discounted return of its trajectory from there on (scaled rewards),
    `gamma ** (steps to the end)` where the trajectory ended on a time-out (the last state's value
    then stands for what followed; 0 after a termination), and its trajectory's last index."""
    rewards = np.asarray(arrays.rewards, np.float64) * reward_scale
    returns = np.zeros_like(rewards)
    tail = np.zeros_like(rewards)
    last = np.zeros(rewards.shape, np.int32)
    for start, length in zip(np.asarray(arrays.start), np.asarray(arrays.length), strict=True):
        end = start + length - 1
        timeout = float(np.asarray(arrays.timeouts)[end] > 0)
        acc, discount = 0.0, gamma * timeout
        for i in range(end, start - 1, -1):
            acc = rewards[i] + gamma * acc
            returns[i], tail[i] = acc, discount
            discount *= gamma
        last[start : end + 1] = end
    return returns.astype(np.float32), tail.astype(np.float32), last


def dataset_per_step(arrays: DatasetArrays) -> tuple[float, float]:
    """`(mean reward per step, terminations per step)` of a dataset: a trajectory's last step is a
    termination unless it was the time limit."""
    rewards = np.asarray(arrays.rewards, np.float64)
    terminations = np.asarray(arrays.dones, np.float64) * (1.0 - np.asarray(arrays.timeouts, np.float64))
    return float(np.mean(rewards)), float(np.mean(terminations))


def rl_imitation_active(cfg: Any) -> bool:
    """Whether a run carries the pretraining's imitation term into its RL iterations."""
    runner = cfg.runner
    return runner.pretrain_iterations > 0 and pretrain_settings(runner.pretrain_dataset).rl_imitation_coef > 0


def make_demonstration_part(name: str, env: Any, cfg: Any, groups: dict) -> DemonstrationPart:
    """The part for `runner.pretrain_dataset`'s `rl_imitation_*` settings, its dataset read for
    the policy's observation `groups` (`{group: shape}`)."""
    settings = pretrain_settings(cfg.runner.pretrain_dataset)
    # two-stage runs have feed-forward policies (configs.loader refuses others), so a dataset
    # step's value needs no memory
    filter_ = settings.rl_imitation_filter
    arrays = load_dataset_arrays(settings, groups, env.action_size, cfg.seed)
    filter_arrays = {}
    if filter_ == "reward":
        filter_arrays.update(
            zip(("dataset_reward", "dataset_terminations"), dataset_per_step(arrays), strict=True)
        )
    if filter_ == "advantage":
        computed = dataset_returns(arrays, cfg.algorithm.gamma, cfg.algorithm.reward_scale)
        names = ("returns", "tail_discount", "last_step")
        filter_arrays = dict(zip(names, map(jnp.asarray, computed), strict=True))
    return DemonstrationPart(
        name=name,
        obs={k: jnp.asarray(v) for k, v in arrays.obs.items()},
        labels=jnp.asarray(arrays.labels),
        coef=settings.rl_imitation_coef,
        iterations=settings.rl_imitation_iterations,
        first_rl_iteration=cfg.runner.pretrain_iterations,
        target=cfg.algorithm.distill_target,
        **filter_arrays,
    )


def build_demonstrations(b: PartBuild) -> DemonstrationPart:
    """The pretraining dataset's decaying pull in the RL iterations, read for the policy's groups."""
    return make_demonstration_part(b.name, b.env, b.cfg, b.policy_shapes)
