"""st_rl's policy class names as configurations of one network family.

st_rl composes policies from mixins (`StateAcRecurrent = EstimatorMixin + ActorCriticRecurrent`,
`PrivilegeStateAcRecurrent = PrivilegeEstimatorMixin + EstimatorMixin + ActorCriticRecurrent`,
`EncoderStateAc = EstimatorMixin + EncoderActorCriticMixin + ActorCritic`,
`VisualDeterministicAC = DeterministicPolicyMixin + VisualActorCriticMixin + ActorCritic`).
Here a class name is a row: a feed-forward or recurrent core, the stages before it
(`networks.estimators`), the encoders of observation components (`networks.encoded_inputs`) and
whether acting takes the mean; their settings are `policy.*` fields under st_rl's names.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from strl_jax.errors import ConfigError
from strl_jax.networks.estimators import StageSpec
from strl_jax.networks.gaussian import DISTRIBUTIONS, GAUSSIAN, TANH_GAUSSIAN, TANH_MIN_STD
from strl_jax.networks.mlp import ACTIVATIONS

ADAPTOR, ESTIMATOR = "adaptor", "estimator"


ENCODER, VISUAL = "encoder", "visual"  # EncoderActorCriticMixin, VisualActorCriticMixin


@dataclasses.dataclass(frozen=True)
class PolicyClass:
    recurrent: bool
    stages: tuple[str, ...] = ()  # in the order they act
    encoders: str | None = None  # ENCODER | VISUAL: which mixin's settings embed components
    deterministic: bool = False  # DeterministicPolicyMixin: acting returns the mean action


POLICY_CLASSES: dict[str, PolicyClass] = {
    "ActorCritic": PolicyClass(recurrent=False),
    "ActorCriticRecurrent": PolicyClass(recurrent=True),
    "StateAc": PolicyClass(recurrent=False, stages=(ESTIMATOR,)),
    "StateAcRecurrent": PolicyClass(recurrent=True, stages=(ESTIMATOR,)),
    "PrivilegeStateAcRecurrent": PolicyClass(recurrent=True, stages=(ADAPTOR, ESTIMATOR)),
    "EncoderActorCritic": PolicyClass(recurrent=False, encoders=ENCODER),
    "EncoderActorCriticRecurrent": PolicyClass(recurrent=True, encoders=ENCODER),
    # st_rl's AMP variant differs only by the discriminator, which is the APPO algorithm's here
    "EncoderAmpActorCriticRecurrent": PolicyClass(recurrent=True, encoders=ENCODER),
    "EncoderStateAc": PolicyClass(recurrent=False, stages=(ESTIMATOR,), encoders=ENCODER),
    "EncoderStateAcRecurrent": PolicyClass(recurrent=True, stages=(ESTIMATOR,), encoders=ENCODER),
    "VisualDeterministicAC": PolicyClass(recurrent=False, encoders=VISUAL, deterministic=True),
    "VisualDeterministicRecurrent": PolicyClass(recurrent=True, encoders=VISUAL, deterministic=True),
}

STAGE_MLP_DEFAULTS = {"hidden_sizes": (128, 64), "nonlinearity": "relu"}  # st_rl MlpModel kwargs


# st_rl's mutex classes combine finished runs and are not trained: `strl_jax.mutex`
# (loaded by `strl_jax.mutex_from_runs`)
MUTEX_CLASS_NAMES = ("ActorCriticMutex", "ActorCriticFieldMutex", "ActorCriticClimbMutex")


def policy_class(name: str) -> PolicyClass:
    if name in MUTEX_CLASS_NAMES:
        raise ConfigError(
            f"policy.class_name {name!r} combines finished runs and is not trained here: load it with "
            "strl_jax.mutex_from_runs.load_mutex_policy or `python -m strl_jax.play <mutex.yaml>`; "
            f"trainable choices: {list(POLICY_CLASSES)}"
        )
    if name not in POLICY_CLASSES:
        raise ConfigError(f"unknown policy.class_name {name!r}; valid choices: {list(POLICY_CLASSES)}")
    return POLICY_CLASSES[name]


@dataclasses.dataclass(frozen=True)
class StageConfig:
    """One stage's `policy.*` settings, under the names st_rl gives that stage."""

    obs_components: Any
    target_components: Any
    kwargs: dict
    replace_prob: float
    memory: bool
    reads_actor_memory: bool
    keys: tuple[str, str, str, str]  # config names of obs, targets, kwargs and replace_prob


def stage_configs(cfg: Any, spec: PolicyClass) -> dict[str, StageConfig]:
    """The settings of the stages `spec` has, checked against each other (st_rl's rules)."""
    out = {}
    if ADAPTOR in spec.stages:
        out[ADAPTOR] = StageConfig(
            cfg.adaptor_obs_components,
            cfg.adaptor_target_components,
            cfg.adaptor_kwargs,
            cfg.privilege_replace_state_prob,
            memory=spec.recurrent and cfg.adaptor_recurrent,
            reads_actor_memory=False,
            keys=(
                "adaptor_obs_components",
                "adaptor_target_components",
                "adaptor_kwargs",
                "privilege_replace_state_prob",
            ),
        )
    if ESTIMATOR in spec.stages:
        if cfg.use_actor_rnn and not spec.recurrent:
            raise ConfigError(
                f"policy.use_actor_rnn needs a recurrent policy; {cfg.class_name} is feed-forward "
                "(use StateAcRecurrent)"
            )
        if cfg.use_actor_rnn and cfg.replace_state_prob > 0:
            raise ConfigError(
                "policy.replace_state_prob > 0 and policy.use_actor_rnn exclude each other: the actor's "
                "memory has already read its observation when the estimate exists (st_rl's rule)"
            )
        out[ESTIMATOR] = StageConfig(
            cfg.estimator_obs_components,
            cfg.estimator_target_components,
            cfg.estimator_kwargs,
            cfg.replace_state_prob,
            memory=spec.recurrent and not cfg.use_actor_rnn,
            reads_actor_memory=cfg.use_actor_rnn,
            keys=(
                "estimator_obs_components",
                "estimator_target_components",
                "estimator_kwargs",
                "replace_state_prob",
            ),
        )
    return out


def check_policy_stages(cfg: Any) -> None:
    """Config checks that need no env: names, probabilities, MLP kwargs, stray stage settings."""
    spec = policy_class(cfg.class_name)
    stages = stage_configs(cfg, spec)
    for sc in stages.values():
        obs_key, target_key, kwargs_key, prob_key = sc.keys
        if not sc.target_components:
            raise ConfigError(
                f"policy.class_name {cfg.class_name} needs policy.{target_key} (component names)"
            )
        if not sc.obs_components and not sc.reads_actor_memory:
            raise ConfigError(f"policy.class_name {cfg.class_name} needs policy.{obs_key} (component names)")
        if not 0.0 <= sc.replace_prob <= 1.0:
            raise ConfigError(f"policy.{prob_key} must lie in [0, 1], got {sc.replace_prob}")
        mlp_kwargs(sc.kwargs, f"policy.{kwargs_key}")
    stray = {
        ESTIMATOR: ("estimator_obs_components", "estimator_target_components", "replace_state_prob"),
        ADAPTOR: ("adaptor_obs_components", "adaptor_target_components", "privilege_replace_state_prob"),
    }
    for name, keys in stray.items():
        if name in stages:
            continue
        set_keys = [k for k in keys if getattr(cfg, k)]
        if set_keys:
            having = [c for c, p in POLICY_CLASSES.items() if name in p.stages]
            raise ConfigError(
                f"policy.{set_keys[0]} is set but policy.class_name {cfg.class_name} has no {name}; "
                f"classes with one: {having}"
            )


def check_action_distribution(cfg: Any, with_actions: dict[str, tuple[str, str]]) -> None:
    """`policy.distribution` (`networks.gaussian.ActionDistribution`) against the run's other
    settings; `with_actions`: the run's parts that treat action means as actions, `{part: (the
    setting that adds it, what it does)}`. `tanh_gaussian` learns in pre-tanh coordinates, so
    whatever treats the action mean as an action, or the std as a parameter, is refused by name."""
    policy = cfg.policy
    if policy.distribution not in DISTRIBUTIONS:
        raise ConfigError(
            f"unknown policy.distribution {policy.distribution!r}; valid choices: {list(DISTRIBUTIONS)}"
        )
    if policy.distribution == GAUSSIAN:
        return
    where = f"policy.distribution={TANH_GAUSSIAN}"
    for part, (setting, why) in with_actions.items():
        value = cfg.algorithm.class_name if setting == "algorithm.class_name" else "set"
        raise ConfigError(
            f"{where} does not combine with {setting}={value} (its {part} part {why} in action "
            f"space, the policy's mean is pre-tanh); with {TANH_GAUSSIAN} use algorithm.class_name "
            f"PPO or EstimatorPPO (algorithm.rnd_cfg allowed), or policy.distribution={GAUSSIAN}"
        )
    if policy.noise_std_type != "scalar":
        raise ConfigError(
            f"policy.noise_std_type={policy.noise_std_type} applies to the learned std of "
            f"policy.distribution={GAUSSIAN}; {where} outputs its std (leave noise_std_type=scalar)"
        )
    if cfg.algorithm.clip_min_std is not None:
        raise ConfigError(
            f"algorithm.clip_min_std clamps the learned std of policy.distribution={GAUSSIAN}; {where} "
            f"outputs its std, which never falls below {TANH_MIN_STD} (set clip_min_std to null)"
        )
    if not policy.init_noise_std > TANH_MIN_STD:
        raise ConfigError(
            f"policy.init_noise_std must exceed {TANH_MIN_STD} (brax's min std) with {where}, got "
            f"{policy.init_noise_std}"
        )


def mlp_kwargs(kwargs: dict, where: str) -> dict:
    """st_rl `MlpModel` kwargs (`hidden_sizes`, `nonlinearity`) with defaults, checked."""
    unknown = sorted(set(kwargs) - set(STAGE_MLP_DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown key {where}.{unknown[0]}; valid keys: {sorted(STAGE_MLP_DEFAULTS)}")
    out = {**STAGE_MLP_DEFAULTS, **kwargs}
    sizes = out["hidden_sizes"]
    if not isinstance(sizes, list | tuple) or not all(isinstance(h, int) and h > 0 for h in sizes):
        raise ConfigError(f"{where}.hidden_sizes must be a list of positive integers, got {sizes!r}")
    if not isinstance(out["nonlinearity"], str) or out["nonlinearity"].lower() not in ACTIVATIONS:
        raise ConfigError(
            f"unknown {where}.nonlinearity {out['nonlinearity']!r}; valid choices: {sorted(ACTIVATIONS)}"
        )
    return {"hidden_sizes": tuple(sizes), "nonlinearity": out["nonlinearity"].lower()}


def _names(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value or ())


def _spans(layout: tuple[tuple[str, int], ...]) -> dict[str, tuple[int, int]]:
    spans, start = {}, 0
    for name, size in layout:
        spans[name] = (start, start + size)
        start += size
    return spans


def group_spans(components: dict | None, group: str, cls: str) -> dict[str, tuple[int, int]]:
    layout = (components or {}).get(group)
    if layout is None:
        raise ConfigError(
            f"policy.class_name {cls} picks observation components by name, but the env's {group!r} group "
            "has no named components (Brax tasks: name them with env.obs_groups.<group>: {name: [indices]})"
        )
    return _spans(layout)


def _pick(spans: dict, names: tuple[str, ...], where: str, group: str) -> list[str]:
    """The named components in the layout's order (st_rl's `get_subobs_by_components`)."""
    unknown = [n for n in names if n not in spans]
    if unknown:
        raise ConfigError(f"{where}: unknown {group} component(s) {unknown}; valid components: {list(spans)}")
    return [n for n in spans if n in names]


def _size(spans: dict, name: str) -> int:
    start, stop = spans[name]
    return stop - start


def _indices(spans: dict, names: list[str]) -> tuple[int, ...]:
    return tuple(i for n in names for i in range(*spans[n]))


def resolve_stages(cfg: Any, spec: PolicyClass, components: dict | None) -> tuple[StageSpec, ...]:
    """The stages of policy class `spec` with their components resolved in the env's layouts
    (`components`: `{group: ((name, size), ...)}`); names it cannot find are a `ConfigError`."""
    if not spec.stages:
        return ()
    check_policy_stages(cfg)
    actor = group_spans(components, "policy", cfg.class_name)
    critic = group_spans(components, "critic", cfg.class_name)
    out = []
    for name, sc in stage_configs(cfg, spec).items():
        obs_key, target_key, kwargs_key, prob_key = sc.keys
        inputs = (
            []
            if sc.reads_actor_memory
            else _pick(actor, _names(sc.obs_components), f"policy.{obs_key}", "policy")
        )
        targets = _pick(critic, _names(sc.target_components), f"policy.{target_key}", "critic")
        slots: tuple[int, ...] = ()
        if sc.replace_prob > 0:
            missing = [t for t in targets if t not in actor]
            wrong = [t for t in targets if t in actor and _size(actor, t) != _size(critic, t)]
            if missing or wrong:
                raise ConfigError(
                    f"policy.{prob_key} > 0 replaces the targets in the actor's input, so every one of "
                    f"policy.{target_key} must be a component of the policy group with the critic's size; "
                    f"missing: {missing}, different size: {wrong}; policy components: {list(actor)}"
                )
            slots = _indices(actor, targets)
        mlp = mlp_kwargs(sc.kwargs, f"policy.{kwargs_key}")
        out.append(
            StageSpec(
                name=name,
                input_idx=_indices(actor, inputs),
                target_idx=_indices(critic, targets),
                slot_idx=slots,
                targets=tuple((t, _size(critic, t)) for t in targets),
                hidden_sizes=mlp["hidden_sizes"],
                nonlinearity=mlp["nonlinearity"],
                memory=sc.memory,
                reads_actor_memory=sc.reads_actor_memory,
                replace_prob=float(sc.replace_prob),
            )
        )
    return tuple(out)
