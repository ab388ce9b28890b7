"""Shared helpers of the benchmark scripts: subprocess workers, strl_jax runs, memory, tables.

Only the standard library is imported at module level: `vs_brax.py` also loads this file in a
separate virtual environment that has brax (and an older jax) but not strl_jax.

`python bench/common.py strl-worker SPEC.json OUT.json` trains strl_jax PPO as SPEC says (in this
process, so that its peak RSS is that of one run) and writes a summary to OUT.json.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent

# Environment variables that would let one side reuse compiled programs from an earlier process.
CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "STRL_JAX_CACHE_DIR")


# ---- machine and memory -------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU's model name as lscpu / /proc/cpuinfo report it."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on (host side; the accelerator is reported by the workers)."""
    total_mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total_mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": total_mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (VmHWM; getrusage as a fallback)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def device_info() -> dict[str, Any]:
    """jax version, devices and, where the backend reports it, the device's peak memory."""
    import jax

    devices = jax.devices()
    info: dict[str, Any] = {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device_count": jax.device_count(),
        "device_kind": devices[0].device_kind,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    try:
        stats = devices[0].memory_stats()
    except Exception:  # noqa: BLE001 - not every backend implements it
        stats = None
    if stats and "peak_bytes_in_use" in stats:
        info["device_peak_mib"] = stats["peak_bytes_in_use"] / 2**20
    return info


# ---- subprocesses -------------------------------------------------------------------------
def xla_cpu_defaults():
    """`strl_jax/xla_cpu.py`, loaded by path: it needs only the standard library, so it also runs
    in interpreters without strl_jax (the brax venv), giving both libraries the same XLA flags."""
    spec = importlib.util.spec_from_file_location("strl_jax_xla_cpu", REPO_DIR / "strl_jax" / "xla_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child_environment(python_path: str | None = None) -> dict[str, str]:
    """The environment for a worker: no persistent compilation cache, unbuffered output.

    The XLA flags that importing strl_jax added here are taken out: each worker adds them again
    for its own jaxlib (an older jaxlib would abort on a flag it lacks).
    """
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    added = xla_cpu_defaults().added_flags()
    flags = [f for f in env.get("XLA_FLAGS", "").split() if f not in added]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPATH", None)
    if python_path:
        env["PYTHONPATH"] = python_path
    return env


def run_worker(
    argv: list[str], spec: dict, work_dir: Path, name: str, timeout: float | None, env: dict | None = None
) -> dict[str, Any]:
    """Run `argv + [spec.json, out.json]` in a subprocess; return its result or the error.

    The worker's console output goes to `<work_dir>/<name>.log`. The result always holds
    `wall_s` (the subprocess as a whole, imports included) and, on failure, `error`.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    spec_path = work_dir / f"{name}.spec.json"
    out_path = work_dir / f"{name}.result.json"
    log_path = work_dir / f"{name}.log"
    spec_path.write_text(json.dumps(spec, indent=1))
    out_path.unlink(missing_ok=True)
    start = time.time()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(
                argv + [str(spec_path), str(out_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env if env is not None else child_environment(),
                timeout=timeout,
                check=False,
            )
            returncode = proc.returncode
        except subprocess.TimeoutExpired:
            returncode = None
    wall = time.time() - start
    result: dict[str, Any] = {}
    if out_path.exists():
        result = json.loads(out_path.read_text())
    if returncode != 0 or not result:
        tail = log_path.read_text(errors="replace").splitlines()[-25:]
        reason = "timed out" if returncode is None else f"exit code {returncode}"
        result.setdefault("error", f"worker {name} failed ({reason}); log {log_path}:\n" + "\n".join(tail))
    result["wall_s"] = wall
    result["log"] = str(log_path)
    return result


def write_json(path: str | Path, data: Any) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, default=str))


# ---- strl_jax training in this process ----------------------------------------------------
class StopRun(Exception):
    """Raised from the metrics sink to end a run early (time limit or target reached)."""


def summarize_strl_rows(
    rows: list[dict], arrivals: list[float], steps_per_iteration: int, target: float | None
) -> dict[str, Any]:
    """Timings of one strl_jax run from its metrics rows (one row per iteration).

    `arrivals[i]` is when row i reached the logger, in seconds from the `train()` call;
    `steps_per_iteration` counts simulator steps (x action_repeat).
    """
    out: dict[str, Any] = {"iterations": len(rows), "steps_per_iteration": steps_per_iteration}
    if not rows:
        return out
    first = rows[0]
    steady = rows[1:]
    steady_time = sum(r["iteration_time"] for r in steady)
    sps = len(steady) * steps_per_iteration / steady_time if steady and steady_time > 0 else None
    # The runner's clock (`wall_time`) starts after env creation, network init and the init jit.
    setup_s = arrivals[0] - first["wall_time"]
    out["sps"] = sps
    out["steady_iterations"] = len(steady)
    out["first_iteration_time_s"] = first["iteration_time"]
    out["compile_s"] = first["iteration_time"] - steps_per_iteration / sps if sps else None
    out["first_iteration_s"] = setup_s + first["iteration_time"]
    out["setup_s"] = setup_s
    out["env_steps"] = rows[-1]["iteration"] * steps_per_iteration
    out["train_time_s"] = sum(r["iteration_time"] for r in rows)
    out["last_row_s"] = arrivals[-1]
    evals = [(r, t) for r, t in zip(rows, arrivals, strict=True) if r.get("eval_reward") is not None]
    out["evals"] = [
        {"env_steps": r["iteration"] * steps_per_iteration, "time_s": t, "reward": r["eval_reward"]}
        for r, t in evals
    ]
    out["final_eval"] = evals[-1][0]["eval_reward"] if evals else None
    out.update(time_to_target(out["evals"], target))
    return out


def time_to_target(evals: list[dict], target: float | None) -> dict[str, Any]:
    """First evaluation whose mean return reaches `target`: its time and env steps."""
    if target is None:
        return {"target": None, "time_to_target_s": None, "steps_to_target": None}
    for e in evals:
        if e["reward"] is not None and e["reward"] >= target:
            return {"target": target, "time_to_target_s": e["time_s"], "steps_to_target": e["env_steps"]}
    return {"target": target, "time_to_target_s": None, "steps_to_target": None}


def strl_worker(spec: dict) -> dict[str, Any]:
    """Train strl_jax PPO with `runner.train` and summarise the rows it logs (metrics.jsonl's).

    spec: task (or preset), config_files (optional), overrides (dotted), log_dir, target (or null),
    time_limit_s (or null; checked at evaluations, or at every iteration when the run has no
    evaluation), stop_at_target, resume_checkpoint (optional: continue the run in log_dir from
    this iteration's checkpoint, as `train --resume` does).

    The rows, their arrival times and the early stop come from a subclass of the runner's logger,
    set for this call where the loop looks the class up: `runners.members.RunLogger`.
    """
    from unittest import mock

    from strl_jax.configs.loader import config_to_dict, resolve_config
    from strl_jax.records.run_logger import RunLogger
    from strl_jax.runners import members as members_module
    from strl_jax.runners import runner as runner_module

    files, overrides = spec.get("config_files"), list(spec.get("overrides", []))
    cfg = resolve_config(spec["task"], config_files=files, overrides=overrides)
    target = spec.get("target")
    time_limit = spec.get("time_limit_s")
    stop_at_target = bool(spec.get("stop_at_target"))
    evaluating = cfg.runner.eval_interval > 0
    rows: list[dict] = []
    arrivals: list[float] = []
    stop_reason = "budget"

    class BenchLogger(RunLogger):
        """The runner's logger, plus arrival times and the early stop the benchmark needs."""

        def write(self, row: dict) -> None:
            nonlocal stop_reason
            arrivals.append(time.time() - call_time)
            rows.append(dict(row))
            super().write(row)
            is_eval = row.get("eval_reward") is not None
            if not is_eval and evaluating:
                return
            if stop_at_target and target is not None and is_eval and row["eval_reward"] >= target:
                stop_reason = "target"
                raise StopRun
            if time_limit is not None and time.time() - call_time >= time_limit:
                stop_reason = "time_limit"
                raise StopRun

    call_time = time.time()
    try:
        with mock.patch.object(members_module, "RunLogger", BenchLogger):
            at = spec.get("resume_checkpoint")
            runner_module.train(
                cfg, log_dir=Path(spec["log_dir"]), verbose=False, resume=at is not None, checkpoint=at
            )
    except StopRun:
        pass
    total_s = time.time() - call_time
    steps = cfg.env.num_envs * cfg.runner.num_steps_per_env * cfg.env.action_repeat
    summary = summarize_strl_rows(rows, arrivals, steps, target)
    summary.update(
        library="strl_jax",
        total_s=total_s,
        stop_reason=stop_reason,
        config=config_to_dict(cfg),
        peak_rss_mib=peak_rss_mib(),
        device=device_info(),
    )
    return summary


# ---- aggregation and printing -------------------------------------------------------------
def median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(present) if present else None


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(value: Any, digits: int = 1) -> str:
    """Numbers for tables: None as '-', large numbers with thousands separators."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits if abs(value) >= 10 else digits + 1}f}"
    return str(value)


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-markdown table with right-aligned columns, ready to paste into BENCHMARKS.md."""
    text = [bool(rows) and all(isinstance(row[i], str) for row in rows) for i in range(len(headers))]
    cells = [[v if isinstance(v, str) else fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    cols = list(zip(widths, text, strict=True))
    lines = ["| " + " | ".join(h.ljust(w) for h, (w, _) in zip(headers, cols, strict=True)) + " |"]
    lines.append("|" + "|".join(":" + "-" * (w + 1) if t else "-" * (w + 1) + ":" for w, t in cols) + "|")
    for row in cells:
        padded = (c.ljust(w) if t else c.rjust(w) for c, (w, t) in zip(row, cols, strict=True))
        lines.append("| " + " | ".join(padded) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "strl-worker":
        print("usage: python bench/common.py strl-worker SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    write_json(argv[2], strl_worker(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
