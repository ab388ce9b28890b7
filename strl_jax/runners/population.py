"""Many runs in one program: `runner.num_seeds` seeds times the grid of `sweep` values, vmapped.

A population is a list of member configs, each an ordinary run config (seed `seed + s`, every
swept field set to one of its values, `num_seeds: 1`, no `sweep`). One compiled `init` and one
compiled `iteration` advance every member at once: the learner is built inside a `jax.vmap` from
a config whose swept fields are traced values, so every place that reads one of them (the
learning rate, the loss weights, GAE's gamma, the optimiser's clip, the initial noise std) reads
the member's own value. A field that shapes the program (a count, a flag, a choice) cannot take
a traced value; sweeping it is refused with the field's name. Members never interact, so member
`m` computes what the single run of its config computes, up to the rounding of batched kernels.

On disk each member is a run folder of its own (`<log_dir>/<member name>/`: config.yaml,
metrics.jsonl, TensorBoard, checkpoints), so play, export and `--resume` work on it alone;
`<log_dir>/population.json` lists the members and their status.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec

from strl_jax.configs.loader import config_from_dict, config_to_dict, set_dotted, validate_config
from strl_jax.configs.schema import TrainConfig
from strl_jax.configs.sweep import sweep_field_type, sweep_points, sweep_settings
from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import ConfigError
from strl_jax.runners.learner_builder import make_learner
from strl_jax.train_loops.learner import Learner

POPULATION_FILE = "population.json"
RUNNING, PRUNED, DIVERGED = "running", "pruned", "diverged"


def is_population(cfg: TrainConfig) -> bool:
    return cfg.runner.num_seeds > 1 or bool(cfg.sweep)


def member_configs(cfg: TrainConfig) -> list[TrainConfig]:
    """Every member's own run config: the settings of `sweep_points` (outer), seeds `seed + s` (inner)."""
    if cfg.runner.num_seeds < 1:
        raise ConfigError(f"runner.num_seeds must be at least 1, got {cfg.runner.num_seeds}")
    settings = sweep_settings(cfg)
    base = config_to_dict(cfg)
    base["sweep"] = {}
    base["runner"]["num_seeds"] = 1
    members = []
    for combo in sweep_points(cfg):
        for s in range(cfg.runner.num_seeds):
            data = copy.deepcopy(base)
            data["seed"] = cfg.seed + s
            data["runner"]["sweep_mode"] = "grid"
            for path, value in zip(settings, combo, strict=True):
                set_dotted(data, path, value)
            try:
                member = config_from_dict(data)
                validate_config(member)
            except ConfigError as err:
                where = ", ".join(f"{p}={v!r}" for p, v in zip(settings, combo, strict=True))
                raise ConfigError(f"sweep member ({where}): {err}") from None
            members.append(member)
    return members


def swept_values(members: list[TrainConfig], paths: list[str]) -> dict[str, np.ndarray]:
    """`{path: [M] array}` of each member's value (what the vmapped program reads)."""
    out = {}
    for path in paths:
        section, name = path.split(".")
        dtype = np.float32 if sweep_field_type(path) is float else np.int32
        out[path] = np.asarray([getattr(getattr(m, section), name) for m in members], dtype)
    return out


def member_name(index: int, member: TrainConfig, paths: list[str]) -> str:
    """`m03_seed2_learning_rate=0.0003`: the folder and TensorBoard run of a member."""
    parts = [f"m{index:02d}", f"seed{member.seed}"]
    for path in paths:
        section, name = path.split(".")
        parts.append(f"{name}={getattr(getattr(member, section), name):g}")
    return "_".join(parts)


def traced_config(cfg: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    """`cfg` with the swept fields set to (traced) values, bypassing the checks a frozen config
    runs on construction: the concrete values were checked in `member_configs`."""
    sections: dict[str, Any] = {}
    for path, value in values.items():
        section, name = path.split(".")
        if section not in sections:
            sections[section] = copy.copy(getattr(cfg, section))
        object.__setattr__(sections[section], name, value)
    out = copy.copy(cfg)
    for section, obj in sections.items():
        object.__setattr__(out, section, obj)
    return out


# What jax raises when Python needs the concrete value of a traced one.
CONCRETIZATION_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError)


@dataclasses.dataclass(frozen=True)
class MemberLearners:
    """Builds the learner of a member whose swept fields hold `values` (traced inside the programs)."""

    env: VecEnv
    base: TrainConfig  # member 0's config: every field but the swept ones is the same for all
    values: dict[str, np.ndarray]  # path -> [M] each member's value
    stacked: bool = True  # states carry a leading member axis (`devices.MemberAxis`)

    def lift(self, fn: Callable, in_axes: Any = 0) -> Callable:
        return jax.vmap(fn, in_axes=in_axes)

    def specs(self, specs: Any) -> Any:
        return member_specs(specs)

    def view(self, tree: Any, index: int) -> Any:
        return member_view(tree, index)

    def stack(self, trees: list[Any]) -> Any:
        return stack_members(trees)

    @property
    def size(self) -> int:
        return len(next(iter(self.values.values()))) if self.values else 0

    def __call__(self, values: dict[str, Any]) -> Learner:
        return make_learner(self.env, traced_config(self.base, values))

    def check_traceable(self, template: Learner) -> None:
        """Trace init, iteration and evaluation with every swept field traced (no compile); a
        field that must be concrete is refused by name."""

        def trace(paths: list[str]) -> None:
            concrete = {p: v[0] for p, v in self.values.items() if p not in paths}

            def everything(traced: dict[str, Any]) -> Any:
                learner = self({**concrete, **traced})
                train_state, rollout_state = learner.init(jax.random.PRNGKey(0))
                out = learner.iteration(train_state, rollout_state)
                eval_env = self.env.replace(num_envs=1)
                params, normalizers = train_state.params, train_state.normalizers
                return out, learner.evaluate(eval_env, params, normalizers, train_state.key)

            jax.eval_shape(everything, {p: self.values[p][0] for p in paths})

        # The config traces with concrete values (the template learner was built from it), so a
        # failure here comes from a value that had to be concrete: jax raises concretization
        # errors, or TypeErrors where a traced value meets a static parameter (a shape, a count).
        try:
            trace(list(self.values))
        except (*CONCRETIZATION_ERRORS, TypeError) as err:
            bad = []
            for path in self.values:
                try:
                    trace([path])
                except (*CONCRETIZATION_ERRORS, TypeError):
                    bad.append(path)
            names = ", ".join(f"sweep.{p}" for p in bad) or "a swept field"
            first = str(err).strip().splitlines()[0]
            raise ConfigError(
                f"{names} cannot be swept in one program: the value decides the program's structure "
                f"(a size, a branch or a host-side computation), not only its numbers ({first}); "
                "run one config per value instead"
            ) from None


def member_specs(specs: Any) -> Any:
    """A member axis in front of every PartitionSpec (members are not sharded)."""
    return jax.tree.map(
        lambda s: PartitionSpec(None, *s), specs, is_leaf=lambda x: isinstance(x, PartitionSpec)
    )


def stack_members(trees: list[Any]) -> Any:
    """One stacked pytree of per-member pytrees (host arrays)."""
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def member_view(tree: Any, index: int) -> Any:
    """Member `index` of a stacked pytree (host arrays or global device arrays)."""
    return jax.tree.map(lambda x: x[index], tree)


# ---------------------------------------------------------------------------- population.json
def write_population_file(log_dir: Path, roster: Any, status: list[str]) -> None:
    """Members (of `roster`, a population's `members.Roster`), their settings and status."""
    names, members, paths = roster.names, roster.configs, roster.paths
    data = {
        "members": [
            {
                "name": name,
                "seed": m.seed,
                "status": s,
                "settings": {p: getattr(getattr(m, p.split(".")[0]), p.split(".")[1]) for p in paths},
            }
            for name, m, s in zip(names, members, status, strict=True)
        ]
    }
    tmp = log_dir / (POPULATION_FILE + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, log_dir / POPULATION_FILE)


def read_member_status(log_dir: Path, names: list[str]) -> list[str]:
    """Each member's stored status (a member pruned or diverged before a resume stays so)."""
    path = log_dir / POPULATION_FILE
    if not path.is_file():
        return [RUNNING] * len(names)
    stored = {m["name"]: m["status"] for m in json.loads(path.read_text())["members"]}
    return [stored.get(n, RUNNING) for n in names]
