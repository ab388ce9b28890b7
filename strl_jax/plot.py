"""`python -m strl_jax.plot <log_dir> [<log_dir> ...]`: learning curves of one or several runs.

One PNG with training reward, episode length and evaluation reward, against environment steps
(top row) and wall time (bottom row), every run overlaid, read from each run's `metrics.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from strl_jax.errors import PlotError

PANELS = (
    ("mean_reward", "train episode return"),
    ("mean_episode_length", "train episode length"),
    ("eval_reward", "eval episode return"),
)
X_AXES = (("env_steps", "environment steps"), ("wall_time", "wall time [s]"))


def read_metrics(log_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of a run's metrics.jsonl (a line cut short by a killed process is skipped)."""
    path = Path(log_dir) / "metrics.jsonl"
    if not path.is_file():
        raise PlotError(f"{str(log_dir)!r} has no metrics.jsonl; is it a strl_jax run folder?")
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def run_labels(log_dirs: list[Path]) -> list[str]:
    """Folder names, or whole paths where two runs share a name."""
    names = [p.resolve().name for p in log_dirs]
    return [str(p) if names.count(n) > 1 else n for p, n in zip(log_dirs, names, strict=True)]


def plot_runs(log_dirs: list[str | Path], out: str | Path) -> Path:
    """Write the comparison figure to `out` (PNG) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dirs = [Path(d) for d in log_dirs]
    runs = [read_metrics(d) for d in dirs]
    size = (5 * len(PANELS), 3.6 * len(X_AXES))
    fig, axes = plt.subplots(len(X_AXES), len(PANELS), figsize=size, squeeze=False)
    for label, rows in zip(run_labels(dirs), runs, strict=True):
        for r, (x_key, x_label) in enumerate(X_AXES):
            for c, (y_key, y_label) in enumerate(PANELS):
                points = [(row[x_key], row[y_key]) for row in rows if row.get(y_key) is not None]
                ax = axes[r][c]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, marker="." if len(points) < 30 else None, label=label)
                ax.set_xlabel(x_label)
                ax.set_ylabel(y_label)
                ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_eval_curves(
    curves: dict[str, list[list[dict[str, float]]]],
    out: str | Path,
    x_axes: tuple[tuple[str, str], ...] = (("env_steps", "environment steps"), ("wall_s", "wall time [s]")),
    title: str = "",
) -> Path:
    """Evaluation return against each x axis, one panel per axis: every run of a label (a seed) as a
    thin line in the label's colour, their mean over the x values all runs share as a thick one.

    `curves[label]` holds one list of points per run, each point a mapping with `reward` and the
    x axes' keys (bench/learning_curves.py's records).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(x_axes), figsize=(5.5 * len(x_axes), 3.8), squeeze=False)
    for index, (label, runs) in enumerate(curves.items()):
        color = f"C{index % 10}"
        for ax, (x_key, x_label) in zip(axes[0], x_axes, strict=True):
            for points in runs:
                xs = [p[x_key] for p in points]
                marker = "." if len(points) < 30 else None
                ax.plot(xs, [p["reward"] for p in points], color=color, alpha=0.35, lw=0.8, marker=marker)
            shared = sorted(set.intersection(*[{p["env_steps"] for p in r} for r in runs])) if runs else []
            if len(runs) > 1 and shared:
                by_step = [{p["env_steps"]: p for p in r} for r in runs]
                xs = [sum(r[s][x_key] for r in by_step) / len(runs) for s in shared]
                ys = [sum(r[s]["reward"] for r in by_step) / len(runs) for s in shared]
                marker = "o" if len(shared) < 30 else None
                ax.plot(xs, ys, color=color, lw=2.0, marker=marker, label=f"{label} (mean of {len(runs)})")
            elif runs:
                ax.lines[-1].set(alpha=1.0, lw=1.5, label=label)
            ax.set_xlabel(x_label)
            ax.set_ylabel("eval episode return")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.plot",
        description="Plot reward, episode length and eval reward against env steps and wall time.",
    )
    parser.add_argument("log_dirs", nargs="+", metavar="log_dir", help="run folders (overlaid)")
    parser.add_argument("--out", metavar="FILE.png", help="PNG to write (default <first log_dir>/curves.png)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(args.log_dirs[0]) / "curves.png"
    try:
        path = plot_runs(args.log_dirs, out)
    except PlotError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ImportError:
        print("error: matplotlib is needed for plots: pip install 'strl_jax[plot]'", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
