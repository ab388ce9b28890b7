"""The table of algorithms: each st_rl / rsl_rl algorithm name is an update rule and its parts.

Config validation, the device-split checks, the env's extra observation groups and the learner
the runner builds all derive from these tables (`runners.learner_builder` builds each row's
part). A new algorithm is a new row of `ALGORITHMS`; a new part is its module (the part, its typed
settings and its builder) and its row of `PARTS`: a part rsl_rl and st_rl have no option for takes
its settings from `algorithm.parts.<name>`, with no edit of the config schema.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from strl_jax.agents.demonstrations import (
    DATASET_PART,
    build_dataset,
    build_demonstrations,
    dataset_settings,
    replays_dataset,
    rl_imitation_active,
)
from strl_jax.agents.estimator import build_estimator, estimator_settings
from strl_jax.agents.lr_schedulers import make_lr_scheduler
from strl_jax.agents.motion_prior import AMP_GROUP, amp_settings, build_motion_prior
from strl_jax.agents.parts import Part, PartBuild
from strl_jax.agents.rnd import RndSettings, build_rnd
from strl_jax.agents.symmetry import SymmetrySettings, build_symmetry
from strl_jax.agents.tppo import build_teacher, teacher_settings
from strl_jax.buffers.rollout_dataset import OPTION as DATASET_OPTION
from strl_jax.config_sections import read_section
from strl_jax.errors import ConfigError
from strl_jax.networks.policy_classes import policy_class

UPDATES = ("ppo", "behavior_cloning")


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """An update rule (`ppo`: minibatch epochs; `behavior_cloning`: rsl_rl Distillation's
    time-ordered BPTT) and the names of the parts it adds, in the order they act."""

    update: str
    parts: tuple[str, ...] = ()

    @property
    def minibatched(self) -> bool:
        """The update splits the rollout into `num_mini_batches` (envs must split evenly)."""
        return self.update == "ppo"


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "PPO": AlgorithmSpec("ppo"),
    "TPPO": AlgorithmSpec("ppo", ("teacher",)),
    "APPO": AlgorithmSpec("ppo", ("amp",)),
    "ATPPO": AlgorithmSpec("ppo", ("teacher", "amp")),
    "Distillation": AlgorithmSpec("behavior_cloning", ("teacher",)),
    "EstimatorPPO": AlgorithmSpec("ppo", ("estimator",)),
    "EstimatorTPPO": AlgorithmSpec("ppo", ("teacher", "estimator")),
    "EstimatorDistillation": AlgorithmSpec("behavior_cloning", ("teacher", "estimator")),
}


@dataclasses.dataclass(frozen=True)
class PartSpec:
    """Everything strl_jax knows of a part besides its module.

    `build(PartBuild) -> Part`: the part for a run, checked against its env (reads files; before
    anything compiles). `section`: the typed dataclass of the mapping `option` names
    (`algorithm.rnd_cfg`, `symmetry_cfg`, `algorithm.parts.<name>`), read by
    `config_sections.read_section`; `settings(cfg)`: settings made of st_rl's flat `algorithm`
    fields (the teacher's, AMP's, the estimator's), read and checked. Both are cheap and name a bad
    key in a `ConfigError`.
    `env_groups`: observation groups the env must provide, read by this part only.
    `option`: the `algorithm` setting that adds it to PPO (rsl_rl's extensions such as `rnd_cfg`,
    or `parts.<name>` for a part of one's own; None there: off).
    `enabled`: for a part that neither an algorithm nor an option adds, when a config turns it on;
    `enabled_by`: the setting that does.
    `plain_ppo_only`: an option part that also needs a feed-forward policy and no part of the
    algorithm's own (rsl_rl). `with_actions`: what it does with actions or action means, which a
    tanh-squashed policy (pre-tanh means) does not allow; None: it combines with one.
    """

    build: Callable[[PartBuild], Part]
    settings: Callable[[Any], Any] | None = None
    section: type | None = None
    env_groups: tuple[str, ...] = ()
    option: str | None = None
    enabled: Callable[[Any], bool] | None = None
    enabled_by: str | None = None
    plain_ppo_only: bool = False
    with_actions: str | None = None

    def option_value(self, alg: Any) -> Any:
        """The mapping `option` names in the `algorithm` section (None: the option is off)."""
        field, _, key = self.option.partition(".")
        value = getattr(alg, field)
        return value.get(key) if key else value

    def read_settings(self, cfg: Any) -> Any:
        """The part's settings for `cfg`, typed and checked (None: it has none)."""
        if self.section is not None:
            return read_section(self.section, self.option_value(cfg.algorithm), self.setting())
        return None if self.settings is None else self.settings(cfg)

    def setting(self) -> str:
        """The config setting that adds the part to a run."""
        if self.option is not None:
            return f"algorithm.{self.option}"
        return self.enabled_by if self.enabled is not None else "algorithm.class_name"


PARTS: dict[str, PartSpec] = {
    "teacher": PartSpec(
        build_teacher,
        teacher_settings,
        with_actions="pulls the action mean towards a teacher's actions",
    ),
    "amp": PartSpec(
        build_motion_prior,
        amp_settings,
        env_groups=(AMP_GROUP,),
        with_actions="compares action means with motion labels",
    ),
    "estimator": PartSpec(build_estimator, estimator_settings),
    "symmetry": PartSpec(
        build_symmetry,
        section=SymmetrySettings,
        option="symmetry_cfg",
        plain_ppo_only=True,
        with_actions="mirrors actions and action means",
    ),
    "rnd": PartSpec(build_rnd, section=RndSettings, option="rnd_cfg"),
    "demonstrations": PartSpec(
        build_demonstrations,
        enabled=rl_imitation_active,
        enabled_by=DATASET_OPTION,
        with_actions="pulls the action mean towards the dataset's actions",
    ),
    DATASET_PART: PartSpec(
        build_dataset, dataset_settings, enabled=replays_dataset, enabled_by=DATASET_OPTION
    ),
}
OWN_SECTION = "parts"  # `algorithm.parts.<name>`: settings of parts without an rsl_rl/st_rl option


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The row of `algorithm.class_name`; an unknown name is a `ConfigError` listing the valid ones."""
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm.class_name {name!r}; valid choices: {list(ALGORITHMS)}")
    return ALGORITHMS[name]


def active_parts(cfg: Any) -> tuple[str, ...]:
    """The parts of `algorithm.class_name`, then those its options turn on, then those other
    settings turn on (two-stage training's dataset and its pull in the RL iterations)."""
    spec = algorithm_spec(cfg.algorithm.class_name)
    options = tuple(
        p for p, row in PARTS.items() if row.option and row.option_value(cfg.algorithm) is not None
    )
    enabled = tuple(p for p, row in PARTS.items() if row.enabled is not None and row.enabled(cfg))
    return spec.parts + options + enabled


def check_option_part(cfg: Any, spec: AlgorithmSpec, part: str) -> None:
    """An option part needs PPO's update; a `plain_ppo_only` one also no other part and a
    feed-forward policy (rsl_rl)."""
    option = PARTS[part].setting()
    plain_only = PARTS[part].plain_ppo_only
    if spec.update != "ppo" or (plain_only and spec.parts):
        plain = [n for n, s in ALGORITHMS.items() if s.update == "ppo" and not (plain_only and s.parts)]
        raise ConfigError(
            f"{option} applies to {plain}, not to algorithm.class_name {cfg.algorithm.class_name}"
        )
    if plain_only and policy_class(cfg.policy.class_name).recurrent:
        raise ConfigError(
            f"{option} does not support recurrent policies (as in rsl_rl); got {cfg.policy.class_name}"
        )


def env_groups(spec: AlgorithmSpec) -> tuple[str, ...]:
    """Extra observation groups the env must provide for the algorithm's parts."""
    return tuple(g for part in spec.parts for g in PARTS[part].env_groups)


def check_algorithm_config(cfg: Any) -> None:
    """Run the config checks of every part of `algorithm.class_name` (assumes a known name), and
    those of the options every update has."""
    spec = algorithm_spec(cfg.algorithm.class_name)
    check_own_sections(cfg)
    if spec.update == "behavior_cloning" and cfg.algorithm.distill_latent_obs_component_mapping:
        raise ConfigError(
            "algorithm.distill_latent_obs_component_mapping is a TPPO option, not "
            f"{cfg.algorithm.class_name}'s"
        )
    for part in active_parts(cfg):
        if PARTS[part].option is not None:
            check_option_part(cfg, spec, part)
        PARTS[part].read_settings(cfg)
    if policy_class(cfg.policy.class_name).stages and "estimator" not in spec.parts:
        trains = [name for name, s in ALGORITHMS.items() if "estimator" in s.parts]
        raise ConfigError(
            f"policy.class_name {cfg.policy.class_name} has an estimator, which only {trains} train; "
            f"algorithm.class_name is {cfg.algorithm.class_name}"
        )
    check_update_options(cfg, spec)


def check_own_sections(cfg: Any) -> None:
    """Every name under `algorithm.parts` is a part that takes its settings there, each a mapping."""
    prefix = f"{OWN_SECTION}."
    valid = [
        row.option.removeprefix(prefix) for row in PARTS.values() if (row.option or "").startswith(prefix)
    ]
    for name, section in cfg.algorithm.parts.items():
        if name not in valid:
            raise ConfigError(
                f"unknown part algorithm.{prefix}{name}; parts that take settings there: {valid}"
            )
        if not isinstance(section, dict):
            raise ConfigError(f"algorithm.{prefix}{name} must be a mapping of settings, got {section!r}")


def part_build(cfg: Any, env: Any, name: str, load_policy: Callable[..., Any] | None) -> PartBuild:
    """What part `name`'s builder reads for a run of `cfg` on `env`."""
    spec = algorithm_spec(cfg.algorithm.class_name)
    row = PARTS[name]
    shapes = env.observation_shapes()
    return PartBuild(
        name=name,
        env=env,
        cfg=cfg,
        algorithm=spec,
        settings=row.read_settings(cfg),
        policy_shapes={k: v for k, v in shapes.items() if k not in env_groups(spec)},
        load_policy=load_policy,
    )


def check_update_options(cfg: Any, spec: AlgorithmSpec) -> None:
    """Learning-rate scheduler, rollout history and hidden-state resampling (st_rl's TPPO options,
    available to every PPO-style update)."""
    alg = cfg.algorithm
    if alg.lr_scheduler_class_name is not None:
        make_lr_scheduler(alg.lr_scheduler_class_name, alg.lr_scheduler, alg.learning_rate)
    elif alg.lr_scheduler:
        raise ConfigError("algorithm.lr_scheduler is set but algorithm.lr_scheduler_class_name is not")
    ratio = alg.buffer_dilation_ratio
    if ratio < 1 or ratio != int(ratio):
        raise ConfigError(
            f"algorithm.buffer_dilation_ratio must be a whole number of rollouts (1, 2, 3, ...), got {ratio}"
        )
    if not 0.0 <= alg.hidden_state_resample_prob <= 1.0:
        raise ConfigError(
            f"algorithm.hidden_state_resample_prob must lie in [0, 1], got {alg.hidden_state_resample_prob}"
        )
    if alg.hidden_state_resample_prob > 0 and not policy_class(cfg.policy.class_name).recurrent:
        raise ConfigError("algorithm.hidden_state_resample_prob needs a recurrent policy")
    if ratio > 1 and "amp" in spec.parts:
        raise ConfigError(
            "algorithm.buffer_dilation_ratio > 1 does not combine with AMP, whose discriminator keeps "
            "its own replay of policy observations"
        )
    if not spec.minibatched and (ratio > 1 or alg.hidden_state_resample_prob > 0):
        raise ConfigError(
            f"algorithm.buffer_dilation_ratio and algorithm.hidden_state_resample_prob apply to the "
            f"minibatch update of PPO-style algorithms, not to {cfg.algorithm.class_name}"
        )


def parts_with_actions(parts: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """`{part: (the setting that adds it, what it does with actions)}` of those among `parts` that
    a tanh-squashed policy does not allow (`networks.policy_classes.check_action_distribution`)."""
    return {p: (PARTS[p].setting(), PARTS[p].with_actions) for p in parts if PARTS[p].with_actions}
