"""Print the `uv pip install` options that give uv the package sources and limits pip is configured
with (pip.conf files and PIP_* variables, as `pip config list` reports them), one per line, so
that both install the same packages: pip weighs every index alike, hence
`--index-strategy unsafe-best-match`; pip's `cert` becomes `SSL_CERT_FILE` (printed as
`env:SSL_CERT_FILE=...`)."""

from __future__ import annotations

import subprocess
import sys

# pip's option -> uv's (both take one value per occurrence; pip lists several separated by spaces)
OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def pip_settings() -> list[tuple[str, str]]:
    """(option, value) pairs of `pip config list`, every scope, in its order."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    pairs = []
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            pairs.append((key.rsplit(".", 1)[-1], value.strip().strip("'\"")))
    return pairs


def uv_options(pairs: list[tuple[str, str]]) -> list[str]:
    lines = ["--index-strategy", "unsafe-best-match"]
    seen = set()
    for option, value in pairs:
        for item in value.split() if option in OPTIONS else [value]:
            if (option, item) in seen:
                continue
            seen.add((option, item))
            if option in OPTIONS:
                lines += [OPTIONS[option], item]
            elif option == "cert":
                lines.append(f"env:SSL_CERT_FILE={item}")
    return lines


if __name__ == "__main__":
    print("\n".join(uv_options(pip_settings())))
