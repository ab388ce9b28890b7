"""One reader for every settings section: a mapping in a config (`algorithm.rnd_cfg`,
`algorithm.symmetry_cfg`, `algorithm.parts.<name>`, `env.height_scan`, `env.forward_depth`,
`runner.pretrain_dataset`) read
into its typed dataclass by `read_section`, so that every section names a bad key, a wrong type
or a bad value the same way:

    unknown algorithm.rnd_cfg key 'wieght'; valid keys: ['num_outputs', ...]
    algorithm.rnd_cfg needs num_outputs: an integer >= 1
    algorithm.symmetry_cfg.mirror_loss_coeff must be a number >= 0, got -1.0
    env.height_scan must be a mapping with keys ['groups', 'geom', ...], got 3

How a section declares itself: a frozen dataclass whose fields are its keys, each made by `key`,

    @dataclasses.dataclass(frozen=True)
    class Settings:
        data_dir: str = key(accept(lambda v: isinstance(v, str) and v, "a folder"))  # required
        coef: float = key(number(minimum=0.0), 0.5)
        labels: str = key(choice(["actions", "mean_actions"]), "actions")

- `key(rule, default)`: one key (no default: the mapping must give it). `Rule(read, valid)`:
  `read(value)` returns the typed value or raises `ValueError` / `TypeError`, and the message is
  `{where}.{key} must be {valid}, got {value!r}`; a `ConfigError` it raises passes unchanged.
  `FLAG`, `integer`, `number`, `choice` and `accept` make the common ones.
  `Nested(section, if_null, null_ok)`: the value is a mapping read as the section `section`
  (null: `if_null`, where `null_ok`).
- `inline(cls, rules)`: keys of a dataclass that is not written for configs (a camera spec),
  given at this level: each rule reads one of its fields, its own defaults fill the rest.
- `selector: ClassVar = (key, {value: keys})`: the value of one key (required) picks which other
  keys the mapping takes, all of them required (rsl_rl's RND `weight_schedule` modes).
- a method `check(self, where)`: conditions between keys; it raises a `ConfigError` naming them.

Reading one: `read_section(Settings, cfg.runner.some_section, "runner.some_section")`; a part's
row names its dataclass as `PartSpec.section` and the reader is called for it. Defaults that
depend on another key's value (a named set of defaults) are merged into the mapping before it is
read. `section_keys(cls)` lists a section's keys and `section_mapping(settings)` writes one back.
This module imports nothing of strl_jax but its errors, so that the parts, the envs and the
configs can all declare sections.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from strl_jax.errors import ConfigError

T = TypeVar("T")
_RULE = "strl_jax.rule"
_INLINE = "strl_jax.inline"


@dataclasses.dataclass(frozen=True)
class Rule:
    """How one value is read (`read`: raises ValueError or TypeError where it is bad) and what a
    valid value is, in words that finish `must be ...`."""

    read: Callable[[Any], Any]
    valid: str


@dataclasses.dataclass(frozen=True)
class Nested:
    """A key whose value is a section of its own (null: `if_null`, where `null_ok`)."""

    section: type
    if_null: Any = None
    null_ok: bool = False

    @property
    def valid(self) -> str:
        return f"a mapping with keys {list(section_keys(self.section))}"


def key(rule: Rule | Nested, default: Any = dataclasses.MISSING) -> Any:
    """A section field: its rule, and its default (none: the key is required)."""
    return dataclasses.field(default=default, metadata={_RULE: rule})


def inline(cls: type, rules: Mapping[str, Rule]) -> Any:
    """A field holding the dataclass `cls`, whose fields `rules` names are keys of this section."""
    unknown = set(rules) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
    return dataclasses.field(default_factory=cls, metadata={_INLINE: (cls, dict(rules))})


# ---- rules -------------------------------------------------------------------------------------
def accept(test: Callable[[Any], bool], valid: str) -> Rule:
    """The values `test` accepts, kept as they are."""

    def read(value: Any) -> Any:
        if not test(value):
            raise ValueError
        return value

    return Rule(read, valid)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


FLAG = accept(lambda v: isinstance(v, bool), "true or false")


def integer(minimum: int | None = None) -> Rule:
    """A whole number (not a bool), at least `minimum`."""

    def ok(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and (minimum is None or v >= minimum)

    return accept(ok, "an integer" + ("" if minimum is None else f" >= {minimum}"))


def number(minimum: float | None = None, above: float | None = None, valid: str | None = None) -> Rule:
    """A finite number as a float: at least `minimum` / more than `above` (`valid`: the words)."""

    def read(v: Any) -> float:
        if not _is_number(v) or (minimum is not None and v < minimum) or (above is not None and v <= above):
            raise ValueError
        return float(v)

    bound = f" >= {minimum:g}" if minimum is not None else f" > {above:g}" if above is not None else ""
    return Rule(read, valid or f"a number{bound}")


def choice(options: Sequence[str]) -> Rule:
    """One of `options`."""
    return accept(lambda v: isinstance(v, str) and v in options, f"one of {list(options)}")


# ---- reading ------------------------------------------------------------------------------------
def _rules(cls: type) -> dict[str, Rule | Nested]:
    """Every key of `cls` and its rule, in field order (inline fields' keys in their place)."""
    out: dict[str, Rule | Nested] = {}
    for field in dataclasses.fields(cls):
        if _INLINE in field.metadata:
            out |= field.metadata[_INLINE][1]
        elif _RULE in field.metadata:
            out[field.name] = field.metadata[_RULE]
    return out


def section_keys(cls: type) -> tuple[str, ...]:
    """The keys a section takes, in declaration order."""
    return tuple(_rules(cls))


def _required(cls: type) -> tuple[str, ...]:
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if _RULE in f.metadata
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )


def _read_value(rule: Rule | Nested, value: Any, where: str) -> Any:
    if isinstance(rule, Nested):
        if value is None and rule.null_ok:
            return rule.if_null
        return read_section(rule.section, value, where)
    try:
        return rule.read(value)
    except ConfigError:
        raise
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be {rule.valid}, got {value!r}") from None


def _taken(cls: type, raw: Mapping, where: str) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """The keys this mapping may give, those it must give, and the words naming the choice that
    decided them (a `selector`'s value)."""
    rules = _rules(cls)
    selector = getattr(cls, "selector", None)
    if selector is None:
        return tuple(rules), _required(cls), ""
    name, key_sets = selector
    if name not in raw:
        raise ConfigError(f"{where} needs {name}: {rules[name].valid}")
    chosen = _read_value(rules[name], raw[name], f"{where}.{name}")
    return (name, *key_sets[chosen]), tuple(key_sets[chosen]), f" with {name} {chosen!r}"


def _names(keys: Sequence[str]) -> str:
    return f"key {keys[0]!r}" if len(keys) == 1 else f"keys {list(keys)}"


def read_section(cls: type[T], raw: Any, where: str) -> T:
    """The mapping `raw` (the config's `where`) as the section dataclass `cls`: every key known,
    every required one given, every value read by its rule, then the section's own `check`."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping with keys {list(section_keys(cls))}, got {raw!r}")
    taken, required, decided = _taken(cls, raw, where)
    unknown = [k for k in raw if k not in taken]
    if unknown:
        raise ConfigError(f"unknown {where} {_names(unknown)}{decided}; valid keys: {list(taken)}")
    rules = _rules(cls)
    missing = [k for k in required if k not in raw]
    if missing:
        needs = "; ".join(f"{k}: {rules[k].valid}" for k in missing)
        raise ConfigError(f"{where}{decided} needs {needs}")
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if _INLINE in field.metadata:
            inner, inner_rules = field.metadata[_INLINE]
            given = {k: _read_value(r, raw[k], f"{where}.{k}") for k, r in inner_rules.items() if k in raw}
            values[field.name] = inner(**given)
        elif _RULE in field.metadata and field.name in raw:
            values[field.name] = _read_value(rules[field.name], raw[field.name], f"{where}.{field.name}")
    settings = cls(**values)
    if hasattr(settings, "check"):
        settings.check(where)
    return settings


def section_mapping(settings: Any) -> dict[str, Any]:
    """A section's settings as the mapping `read_section` reads them from (tuples as lists, a
    `selector`'s section with only the keys its choice takes)."""
    cls = type(settings)
    out: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        value = getattr(settings, field.name)
        if _INLINE in field.metadata:
            out |= {k: getattr(value, k) for k in field.metadata[_INLINE][1]}
        elif _RULE in field.metadata:
            nested = dataclasses.is_dataclass(value) and not isinstance(value, type)
            out[field.name] = section_mapping(value) if nested else value
    selector = getattr(cls, "selector", None)
    if selector is not None:
        name, key_sets = selector
        out = {k: v for k, v in out.items() if k in (name, *key_sets[out[name]])}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
