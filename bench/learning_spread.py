"""Spread of the test suite's seeded learning runs over seeds and XLA:CPU rounding variants.

A seeded end-to-end test lands elsewhere on another CPU model; its thresholds must hold across
that spread. This script runs the suite's learning scenarios (`tests/learning_runs.py`, the same
functions the tests call) for many seeds, once with strl_jax's XLA:CPU default and once with
XLA's own flags (each in its own process: the flag is read when jax starts), and prints every
outcome, so that a threshold can be set with margin:

    python bench/learning_spread.py --seeds 1 2 3 4 5 6 --cases expert imitation memory
    python bench/learning_spread.py --worker off --seeds 1 2 --cases memory --out /tmp/x.json

Cases: `expert` (full-state PPO pendulum expert: eval return after 20/40/60 iterations),
`imitation` (APPO on the style reward alone, expert and APPO of the same seed), `memory` (LSTM vs
MLP on the partially observed pendulum), `students` (TPPO and Distillation students of that seed's
expert, with the teacher's return on their env).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = ("expert", "imitation", "memory", "students")


def run_case(case: str, seed: int, work: Path) -> dict:
    # Imported here, not at the top: the worker sets the XLA:CPU flag before strl_jax starts jax.
    from learning_runs import (
        STUDENTS,
        memory_vs_feedforward,
        student_cfg,
        style_imitation,
        teacher_return_on_student_env,
        train_expert,
    )

    from strl_jax.train_loops.runner import train

    if case == "expert":
        path, best = train_expert(work / "expert", seed)
        rows = [json.loads(line) for line in (work / "expert" / "metrics.jsonl").read_text().splitlines()]
        evals = {r["iteration"]: r["eval_reward"] for r in rows if "eval_reward" in r}
        return {"evals": evals, "chosen": path.name, "best": best}
    if case == "imitation":
        expert, expert_return = train_expert(work / "expert", seed)
        out = style_imitation(work, expert, seed=seed, at=(30, 45, 60))
        acc = [r["discriminator_accuracy_policy"] for r in out.pop("rows")]
        return {**out, "expert_return": expert_return, "policy_acc_every_5": acc[4::5]}
    if case == "students":
        expert, _ = train_expert(work / "expert", seed)
        out = {"teacher_return": teacher_return_on_student_env(expert)}
        for preset in STUDENTS:
            result = train(student_cfg(preset, expert, f"seed={seed}"), work / preset, verbose=False)
            evals = [r["eval_reward"] for r in result.rows if "eval_reward" in r]
            out[preset.rsplit("_", 1)[-1]] = {"best": max(evals), "last": evals[-1]}
        return out
    if case == "memory":
        rnn, mlp = memory_vs_feedforward(work, seed)
        return {"lstm_best": rnn, "mlp_best": mlp}
    raise ValueError(f"unknown case {case!r}; choose from {CASES}")


def worker(flag: str, seeds: list[int], cases: list[str], out: Path) -> None:
    """Run in a fresh process: `flag` picks strl_jax's XLA:CPU default (on) or XLA's own (off)."""
    os.environ["STRL_JAX_XLA_CPU_DEFAULTS"] = "1" if flag == "on" else "0"
    sys.path.insert(0, str(REPO / "tests"))
    import strl_jax  # noqa: F401  (applies the XLA default before jax starts)
    from strl_jax.train_loops.runner import enable_compilation_cache

    enable_compilation_cache()
    results = []
    for case in cases:
        for seed in seeds:
            start = time.time()
            with tempfile.TemporaryDirectory() as tmp:
                outcome = run_case(case, seed, Path(tmp))
            seconds = round(time.time() - start, 1)
            results.append({"flag": flag, "case": case, "seed": seed, "seconds": seconds, **outcome})
            print(json.dumps(results[-1], default=float), flush=True)
            out.write_text(json.dumps(results, default=float, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--flags", nargs="+", choices=("on", "off"), default=["off", "on"])
    parser.add_argument("--worker", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("learning_spread.json"))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.seeds, args.cases, args.out)
        return
    results = []
    for flag in args.flags:
        part = args.out.with_suffix(f".{flag}.json")
        cmd = [sys.executable, __file__, "--worker", flag, "--out", str(part), "--seeds",
               *map(str, args.seeds), "--cases", *args.cases]  # fmt: skip
        subprocess.run(cmd, check=True)
        results += json.loads(part.read_text())
    args.out.write_text(json.dumps(results, indent=1))
    print(f"\n{'case':10} {'flag':4} {'seed':>4}  outcome")
    for r in results:
        shown = {k: v for k, v in r.items() if k not in ("case", "flag", "seed")}
        print(f"{r['case']:10} {r['flag']:4} {r['seed']:>4}  {json.dumps(shown, default=float)}")


if __name__ == "__main__":
    main()
