"""The one reader of settings sections (`strl_jax.config_sections.read_section`) on a section
declared here: each kind of bad input is named with the key and the valid choices, and a
section written back (`section_mapping`) reads as the same settings."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from strl_jax.config_sections import (
    FLAG,
    Nested,
    choice,
    inline,
    integer,
    key,
    number,
    read_section,
    section_keys,
    section_mapping,
)
from strl_jax.errors import ConfigError

WHERE = "algorithm.parts.toy"


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A nested section whose `kind` picks the keys it takes."""

    selector: ClassVar = ("kind", {"flat": (), "ramp": ("start", "end")})
    kind: str = key(choice(["flat", "ramp"]), "flat")
    start: int = key(integer(0), 0)
    end: int = key(integer(0), 0)

    def check(self, where: str) -> None:
        if self.kind == "ramp" and self.end <= self.start:
            raise ConfigError(f"{where}: end ({self.end}) must be after start ({self.start})")


@dataclasses.dataclass(frozen=True)
class Spec:
    """A dataclass not written for configs, its fields given at the section's level."""

    width: int = 3
    gain: float = 1.0


@dataclasses.dataclass(frozen=True)
class Toy:
    """A section with every kind of key: required, defaulted, nested, inline."""

    size: int = key(integer(1))
    coef: float = key(number(minimum=0.0), 0.5)
    on: bool = key(FLAG, False)
    schedule: Schedule = key(Nested(Schedule, Schedule(), null_ok=True), Schedule())
    spec: Spec = inline(Spec, {"width": integer(1), "gain": number(above=0.0)})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (3, r"algorithm.parts.toy must be a mapping with keys \['size', 'coef', 'on', 'schedule', 'width'"),
        ({"size": 1, "sise": 2}, r"unknown algorithm.parts.toy key 'sise'; valid keys: \['size', 'coef'"),
        ({"size": 1, "a": 1, "b": 2}, r"unknown algorithm.parts.toy keys \['a', 'b'\]; valid keys"),
        ({"coef": 1.0}, r"algorithm.parts.toy needs size: an integer >= 1$"),
        ({"size": 0}, r"algorithm.parts.toy.size must be an integer >= 1, got 0"),
        ({"size": 1.0}, r"algorithm.parts.toy.size must be an integer >= 1, got 1.0"),
        ({"size": 1, "coef": -1}, r"algorithm.parts.toy.coef must be a number >= 0, got -1"),
        ({"size": 1, "coef": True}, r"algorithm.parts.toy.coef must be a number >= 0, got True"),
        ({"size": 1, "on": "yes"}, r"algorithm.parts.toy.on must be true or false, got 'yes'"),
        ({"size": 1, "gain": 0}, r"algorithm.parts.toy.gain must be a number > 0, got 0"),
        ({"size": 1, "schedule": {}}, r"toy.schedule needs kind: one of \['flat', 'ramp'\]"),
        ({"size": 1, "schedule": {"kind": "wave"}}, r"toy.schedule.kind must be one of \['flat', 'ramp'\]"),
        (
            {"size": 1, "schedule": {"kind": "ramp", "end": 2}},
            r"schedule with kind 'ramp' needs start: an integer",
        ),
        (
            {"size": 1, "schedule": {"kind": "flat", "end": 2}},
            r"unknown algorithm.parts.toy.schedule key 'end' with kind 'flat'; valid keys: \['kind'\]",
        ),
        (
            {"size": 1, "schedule": {"kind": "ramp", "start": 3, "end": 3}},
            r"algorithm.parts.toy.schedule: end \(3\) must be after start \(3\)",
        ),
    ],
)
def test_bad_sections_name_the_key_and_what_is_valid(raw, message):
    with pytest.raises(ConfigError, match=message):
        read_section(Toy, raw, WHERE)


def test_defaults_fill_what_a_section_leaves_out_and_a_written_section_reads_the_same():
    toy = read_section(Toy, {"size": 2, "schedule": None, "gain": 4}, WHERE)
    assert toy == Toy(size=2, spec=Spec(width=3, gain=4.0))
    assert section_keys(Toy) == ("size", "coef", "on", "schedule", "width", "gain")
    ramp = read_section(Toy, {"size": 2, "schedule": {"kind": "ramp", "start": 1, "end": 5}}, WHERE)
    written = section_mapping(ramp)
    assert written["schedule"] == {"kind": "ramp", "start": 1, "end": 5}
    assert section_mapping(toy)["schedule"] == {"kind": "flat"}  # only the keys its kind takes
    assert read_section(Toy, written, WHERE) == ramp
