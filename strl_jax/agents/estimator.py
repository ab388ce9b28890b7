"""EstimatorPPO / EstimatorTPPO (st_rl `EstimatorAlgoMixin`), and EstimatorDistillation (the same
mixin on rsl_rl's Distillation): the supervised loss of the policy's estimator stages, as a learner
part.

The estimator and adaptor are part of the policy network (`networks.estimators`); this part adds
their losses: st_rl's `estimator_loss_func` (a torch.nn.functional name) between each stage's
estimate and its target components of the normalised critic observation, summed over features and
averaged over samples, weighted by `estimator_loss_coef` (`adaptor_loss_coef` for the adaptor, a
term st_rl's algorithm page does not describe). PPO's updates add it to each minibatch's loss,
Distillation's to each step of its walk through time. It also logs, per predicted component, the RMSE of
the estimates made while acting, in the env's units (`Estimator/<stage>_rmse_<component>`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from strl_jax.agents.parts import EnvStep, LossContext, Part, PartBuild, StepContext, StepOutput
from strl_jax.agents.regression_losses import check_regression_loss, elementwise_regression_loss
from strl_jax.errors import ConfigError
from strl_jax.networks.estimators import StageSpec
from strl_jax.networks.policy import make_policy_model
from strl_jax.networks.policy_classes import POLICY_CLASSES, policy_class
from strl_jax.static_take import take_static

CRITIC = "critic"


def component_spans(stage: StageSpec) -> list[tuple[str, int, int]]:
    """`(name, start, stop)` of each predicted component within the stage's estimate."""
    out, start = [], 0
    for name, size in stage.targets:
        out.append((name, start, start + size))
        start += size
    return out


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class EstimatorPart(Part):
    """The losses and tracking errors of the policy's estimator stages."""

    stages: tuple[StageSpec, ...]
    loss_func: str = "mse_loss"
    loss_kwargs: dict = dataclasses.field(default_factory=dict)
    coefs: dict = dataclasses.field(default_factory=dict)  # per stage name

    @property
    def sections(self) -> dict[str, str]:  # type: ignore[override]
        out = {s.name: "Loss" for s in self.stages}
        for s in self.stages:
            out |= {rmse_name(s, c): "Estimator" for c, _, _ in component_spans(s)}
        return out

    def on_step(self, train: Any, rollout: Any, ctx: StepContext, env: EnvStep, reward, acted) -> StepOutput:
        """Squared errors of this step's estimates (env units), per component, for the RMSE."""
        sums = {}
        for s in self.stages:
            target = take_static(ctx.obs[CRITIC], s.target_idx)
            err = jnp.square(ctx.estimates[s.name] - target)
            for c, start, stop in component_spans(s):
                sums[rmse_name(s, c)] = err[..., start:stop].sum()
        return StepOutput(reward=reward, rollout=rollout, sums=sums)

    def iteration_metrics(self, train, sums: dict, num_samples, iteration):
        sizes = {rmse_name(s, c): stop - start for s in self.stages for c, start, stop in component_spans(s)}
        return {k: jnp.sqrt(v / (num_samples * sizes[k])) for k, v in sums.items()}

    def losses(self, params, train, ctx: LossContext, inputs):
        losses, coefs, metrics = {}, {}, {}
        for s in self.stages:
            target = take_static(ctx.batch.obs[CRITIC], s.target_idx)
            per_feature = elementwise_regression_loss(
                self.loss_func, ctx.estimates[s.name], target, self.loss_kwargs
            )
            loss = jnp.mean(jnp.sum(per_feature, axis=-1))
            losses[f"{s.name}_loss"] = loss
            coefs[f"{s.name}_loss"] = self.coefs[s.name]
            metrics[s.name] = loss
        return losses, coefs, metrics


def rmse_name(stage: StageSpec, component: str) -> str:
    return f"{stage.name}_rmse_{component}"


@dataclasses.dataclass(frozen=True)
class EstimatorSettings:
    """The estimator's settings, from st_rl's `algorithm.estimator_loss_*` and `adaptor_loss_coef`."""

    loss_func: str
    loss_kwargs: dict
    coefs: dict[str, float]  # {"estimator": ..., "adaptor": ...}


def estimator_settings(cfg: Any) -> EstimatorSettings:
    """The Estimator algorithms need a policy with estimator stages, and a known loss."""
    if not policy_class(cfg.policy.class_name).stages:
        having = [name for name, p in POLICY_CLASSES.items() if p.stages]
        raise ConfigError(
            f"algorithm.class_name {cfg.algorithm.class_name} trains the policy's estimator, but "
            f"policy.class_name {cfg.policy.class_name} has none; valid choices: {having}"
        )
    alg = cfg.algorithm
    check_regression_loss(alg.estimator_loss_func, alg.estimator_loss_kwargs)
    return EstimatorSettings(
        loss_func=alg.estimator_loss_func,
        loss_kwargs=dict(alg.estimator_loss_kwargs),
        coefs={"estimator": alg.estimator_loss_coef, "adaptor": alg.adaptor_loss_coef},
    )


def build_estimator(b: PartBuild) -> EstimatorPart:
    """The losses of the policy's estimator stages (the Estimator algorithms)."""
    env, settings = b.env, b.settings
    stages = make_policy_model(env.action_size, b.cfg.policy, env.components, env.component_shapes).stages
    return EstimatorPart(
        name=b.name,
        stages=stages,
        loss_func=settings.loss_func,
        loss_kwargs=settings.loss_kwargs,
        coefs=settings.coefs,
    )
