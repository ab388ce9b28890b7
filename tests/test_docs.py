"""README.md and BENCHMARKS.md say only what the repository has, as far as a script can tell:
every config field is documented, every setting and file they name exists, the README's "Not
yet" list names nothing that exists, and `train --help` names both task families."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from strl_jax.agents.algorithms import ALGORITHMS
from strl_jax.configs.schema import TrainConfig
from strl_jax.networks.policy_classes import POLICY_CLASSES
from strl_jax.train import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {name: (ROOT / name).read_text() for name in ("README.md", "BENCHMARKS.md")}
SECTIONS = ("env", "policy", "algorithm", "runner")
# dotted words in the README's code that are files or attributes, not settings
NOT_SETTINGS = {"policy.onnx", "policy.jax_export", "env.dt", "runner.py"}
# features once listed as missing, and the setting or class that has them now
FEATURES = {
    "two-stage runner": "runner.pretrain_iterations",
    "TwoStageRunner": "runner.pretrain_iterations",
    "height scan": "env.height_scan",
    "depth": "env.forward_depth",
    "symmetry": "algorithm.symmetry_cfg",
    "RND": "algorithm.rnd_cfg",
    "lr scheduler": "algorithm.lr_scheduler_class_name",
    "hidden-state resampling": "algorithm.hidden_state_resample_prob",
}


def config_fields(cls=TrainConfig, prefix: str = "") -> dict[str, dataclasses.Field]:
    """Every leaf setting by its dotted name (nested sections such as `algorithm.teacher_policy`
    are walked, not listed)."""
    out = {}
    for f in dataclasses.fields(cls):
        factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if factory is not None and dataclasses.is_dataclass(factory):
            out |= config_fields(factory, f"{prefix}{f.name}.")
        else:
            out[prefix + f.name] = f
    return out


FIELDS = config_fields()
NESTED = {name.rsplit(".", 1)[0] for name in FIELDS if name.count(".") > 1}


def code(text: str) -> list[str]:
    """The fenced blocks and inline code spans of a markdown text."""
    fences = re.findall(r"```.*?```", text, re.S)
    rest = re.sub(r"```.*?```", " ", text, flags=re.S)
    return fences + re.findall(r"`([^`\n]+)`", rest)


def test_every_config_field_is_in_the_readme():
    words = set(re.findall(r"\w+", " ".join(code(README))))
    missing = [name for name in FIELDS if name.rsplit(".", 1)[-1] not in words]
    assert not missing, f"config fields the README never names: {missing}"


def test_every_setting_the_readme_names_exists():
    """`section.field` in the README's code is a field (or a nested section, or a key inside a
    mapping field such as `env.playground.<key>`)."""
    unknown = set()
    for span in code(README):
        for match in re.finditer(r"(?<![\w./-])((?:env|policy|algorithm|runner)(?:\.\w+)+)", span):
            parts = match.group(1).split(".")
            prefixes = {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
            if not prefixes & (set(FIELDS) | NESTED | NOT_SETTINGS):
                unknown.add(match.group(1))
    assert not unknown, f"the README names settings that do not exist: {sorted(unknown)}"


def not_yet(text: str) -> list[str]:
    """The README's paragraphs that list what is missing."""
    return [p for p in re.split(r"\n\s*\n", text) if re.match(r"\s*(- )?Not yet\b", p)]


def test_not_yet_names_nothing_that_exists():
    paragraphs = not_yet(README)
    assert paragraphs, "the README's 'Not yet' list moved: update this test"
    existing = set(ALGORITHMS) | set(POLICY_CLASSES) | {n.rsplit(".", 1)[-1] for n in FIELDS} | set(FIELDS)
    for paragraph in paragraphs:
        named = {w for span in re.findall(r"`([^`]+)`", paragraph) for w in re.findall(r"[\w.]+", span)}
        assert not named & existing, (paragraph, sorted(named & existing))
        for phrase, setting in FEATURES.items():
            assert setting in FIELDS
            assert phrase.lower() not in paragraph.lower(), f"'Not yet' lists {phrase!r}, which is {setting}"


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_files_the_docs_name_exist(doc):
    """Scripts, tests, modules, presets and documents named in the docs are in the repository."""
    named = set(
        re.findall(r"(?<![\w/.])((?:bench|tests|strl_jax|configs)/[\w/.-]+\.(?:py|yaml|sh))", DOCS[doc])
    )
    named |= {m for m in re.findall(r"(?<![\w/.-])([A-Z][A-Z_]+\.md)\b", DOCS[doc])}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{doc} names files the repository does not have: {missing}"


def test_train_help_names_both_task_families_and_every_algorithm():
    text = " ".join(build_parser().format_help().split())
    assert "Brax or MuJoCo Playground task" in text
    assert "Train PPO on a Brax environment" not in text and "algorithm.class_name" in text
