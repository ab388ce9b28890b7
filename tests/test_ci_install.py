"""`.ci/run` installs with uv given pip's configuration (`.ci/uv_flags.py`): every source and limit
pip is configured with reaches uv once, and uv weighs the indexes alike, as pip does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def uv_flags():
    spec = importlib.util.spec_from_file_location("uv_flags", ROOT / ".ci" / "uv_flags.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pip_configuration_becomes_the_same_uv_options_once_each():
    pairs = [  # `pip config list` of a machine with local wheels, two local indexes and a cap
        ("cert", "/etc/ssl/certs/ca.crt"),
        ("find-links", "/opt/wheels"),
        ("constraint", "/etc/xdg/pip/constraints.txt"),
        ("extra-index-url", "file:///opt/a/simple file:///opt/b/simple"),
        ("find-links", "/opt/wheels"),  # the same setting from PIP_FIND_LINKS
        ("default-timeout", "180"),
        ("index-url", "https://mirror.example/simple"),
    ]
    assert uv_flags().uv_options(pairs) == [
        "--index-strategy",
        "unsafe-best-match",
        "env:SSL_CERT_FILE=/etc/ssl/certs/ca.crt",
        "--find-links",
        "/opt/wheels",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
        "--extra-index-url",
        "file:///opt/a/simple",
        "--extra-index-url",
        "file:///opt/b/simple",
        "--index-url",
        "https://mirror.example/simple",
    ]


def test_no_pip_configuration_leaves_uv_its_defaults_and_pips_index_strategy():
    assert uv_flags().uv_options([]) == ["--index-strategy", "unsafe-best-match"]
