"""Spread of the test suite's learning assertions over seeds and XLA:CPU rounding variants.

A seeded end-to-end test lands elsewhere on another CPU model; its thresholds must hold across
that spread. This script runs the suite's learning scenarios (`tests/learning_runs.py`, the same
functions the tests call) for many seeds, with strl_jax's XLA:CPU default on and off (XLA's own
flags), each in its own process (the flag is read when jax starts), and prints every outcome, so
that a threshold can be set with margin below the worst seed:

    python bench/learning_spread.py --seeds 1 2 3 4 5 6 --cases expert imitation memory
    python bench/learning_spread.py --seeds 1 2 3 4 --cases balance tanh estimator --flags on
    python bench/learning_spread.py --cases estimator --optimisations on,off
    python bench/learning_spread.py --worker off --seeds 1 2 --cases memory --out /tmp/x.json

Each case compiles as its test module does (`--optimisations module`, the default): with XLA's
optimisations where the module is in tests/conftest.py's `OPTIMISED`, else with
`JAX_DISABLE_MOST_OPTIMIZATIONS=1` set before jax starts; `--optimisations on,off` runs both.
`ASSERTIONS` lists every learning assertion of the suite and the case that measures it (or the
benchmark that does); tests/test_learning_spread_lists.py holds the two lists and `OPTIMISED`
together.

Cases: `expert` (full-state PPO pendulum expert: eval return after 20/40/60 iterations),
`imitation` (APPO on the style reward alone, expert and APPO of the same seed), `memory` (LSTM vs
MLP on the partially observed pendulum), `students` (TPPO and Distillation students of that seed's
expert, with the teacher's return on their env), `balance` (the default inverted_pendulum preset's
best eval return), `tanh` (the tanh-Gaussian pendulum's best training return over its first),
`estimator` (EstimatorPPO's trained estimator error over the initial one's).
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
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]


class Case(NamedTuple):
    module: str  # the test module whose assertions it measures
    optimised: bool  # the setting its spread (BENCHMARKS.md) was measured with: the module's own


CASES: dict[str, Case] = {
    # the conftest fixture `pendulum_expert` always trains optimised, whichever module asks first
    "expert": Case("conftest", True),
    "imitation": Case("test_amp_imitation", True),
    "memory": Case("test_recurrent", True),
    "students": Case("test_teacher_student", True),
    "balance": Case("test_training", True),
    "tanh": Case("test_tanh_gaussian", True),
    "estimator": Case("test_estimator_training", False),
}


class Assertion(NamedTuple):
    threshold: str
    case: str | None = None  # a case of this script, or
    elsewhere: str | None = None  # the benchmark script (in bench/) whose spread sets it


# Every learning assertion of the suite (a threshold on a return, an episode length, a distance or
# an error reached by training): "module::test: what" -> its threshold and where its spread is
# measured. The ones marked `elsewhere` are being re-measured by their own benchmarks.
ASSERTIONS: dict[str, Assertion] = {
    "conftest::pendulum_expert: eval return": Assertion("== 200 (asserted by its users)", "expert"),
    "test_training::test_inverted_pendulum_learns_to_balance: best eval return": Assertion(
        ">= 900 with seed 1, or seed 3 where seed 1 misses", "balance"
    ),
    "test_tanh_gaussian::test_inverted_pendulum_learns: best training return": Assertion(
        ">= max(70, 3x the first)", "tanh"
    ),
    "test_estimator_training::test_estimator_is_trained_and_logged: estimator error": Assertion(
        "< 0.4x the initial", "estimator"
    ),
    "test_recurrent::test_memory_beats_mlp_when_velocities_are_hidden: LSTM best return": Assertion(
        ">= 2x MLP and >= 400", "memory"
    ),
    "test_amp_imitation::test_style_reward_alone_imitates_the_expert: episode length": Assertion(
        ">= 120 and > 1.5x untrained", "imitation"
    ),
    "test_amp_imitation::test_style_reward_alone_imitates_the_expert: pole-angle W1": Assertion(
        "< untrained's", "imitation"
    ),
    "test_teacher_student::test_student_reaches_80_percent_of_the_teacher: teacher return": Assertion(
        ">= 180", "students"
    ),
    "test_teacher_student::test_student_reaches_80_percent_of_the_teacher: student best": Assertion(
        ">= 0.8x teacher", "students"
    ),
    # Being re-measured by the engineers changing these modules (see each assertion's comment):
    "test_two_stage: distances, label errors and returns after pretraining": Assertion(
        "0.35x / 0.5x / 0.1x / 0.9x / >= 150 / +25", elsewhere="bench/two_stage.py"
    ),
    "test_playground_training: falls over the last 10 iterations": Assertion(
        "< 0.5x the first 10", elsewhere="the module's comments"
    ),
    "test_parts: reward_prediction loss": Assertion("< 0.5x the first", elsewhere="the module's comments"),
    "test_symmetry / test_appo / test_update_options / test_custom_robot_example": Assertion(
        "see the modules", elsewhere="the modules' comments"
    ),
}


def run_case(case: str, seed: int, work: Path) -> dict:
    # Imported here, not at the top: the worker sets the XLA:CPU flag before strl_jax starts jax.
    from learning_runs import (
        STUDENTS,
        estimator_error_ratio,
        memory_vs_feedforward,
        pendulum_balance,
        student_cfg,
        style_imitation,
        tanh_gaussian_run,
        tanh_returns,
        teacher_return_on_student_env,
        train_expert,
    )

    from strl_jax.runners.runner import train

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
    if case == "balance":
        evals = pendulum_balance(work, seed)
        return {"best": max(evals), "evals": evals}
    if case == "tanh":
        returns = tanh_returns(tanh_gaussian_run(work, seed))
        return {"best": max(returns), "first": returns[0], "ratio": max(returns) / returns[0]}
    if case == "estimator":
        return estimator_error_ratio(work, seed)
    raise ValueError(f"unknown case {case!r}; choose from {CASES}")


def worker(flag: str, optimised: bool, seeds: list[int], cases: list[str], out: Path) -> None:
    """Run in a fresh process: `flag` picks strl_jax's XLA:CPU default (on) or XLA's own (off),
    `optimised` XLA's optimisations (off: `JAX_DISABLE_MOST_OPTIMIZATIONS=1`, as conftest sets)."""
    os.environ["STRL_JAX_XLA_CPU_DEFAULTS"] = "1" if flag == "on" else "0"
    if optimised:
        os.environ.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)
    else:
        os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    sys.path.insert(0, str(REPO / "tests"))
    import jax

    import strl_jax  # noqa: F401  (applies the XLA default before jax starts)
    from strl_jax.runners.runner import enable_compilation_cache

    jax.config.update("jax_disable_most_optimizations", not optimised)
    enable_compilation_cache()
    results = []
    for case in cases:
        for seed in seeds:
            start = time.time()
            with tempfile.TemporaryDirectory() as tmp:
                outcome = run_case(case, seed, Path(tmp))
            seconds = round(time.time() - start, 1)
            results.append(
                {"flag": flag, "optimised": optimised, "case": case, "seed": seed, "seconds": seconds,
                 **outcome}
            )  # fmt: skip
            print(json.dumps(results[-1], default=float), flush=True)
            out.write_text(json.dumps(results, default=float, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--flags", nargs="+", choices=("on", "off"), default=["off", "on"])
    parser.add_argument(
        "--optimisations",
        default="module",
        help="module (each case as its test module compiles), or a comma list of on / off",
    )
    parser.add_argument("--worker", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--optimised", choices=("1", "0"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("learning_spread.json"))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.optimised == "1", args.seeds, args.cases, args.out)
        return
    choices = args.optimisations.split(",")
    if not set(choices) <= {"module", "on", "off"}:
        parser.error(f"--optimisations: module, or a comma list of on / off, not {args.optimisations!r}")
    results = []
    for flag in args.flags:
        for choice in choices:
            for optimised in (True, False):
                want = [c for c in args.cases if CASES[c].optimised == optimised]
                if choice != "module":
                    want = args.cases if (choice == "on") == optimised else []
                if not want:
                    continue
                part = args.out.with_suffix(f".{flag}.{'opt' if optimised else 'quick'}.json")
                cmd = [sys.executable, __file__, "--worker", flag, "--optimised", str(int(optimised)),
                       "--out", str(part), "--seeds", *map(str, args.seeds), "--cases", *want]  # fmt: skip
                subprocess.run(cmd, check=True)
                results += json.loads(part.read_text())
    args.out.write_text(json.dumps(results, indent=1))
    print(f"\n{'case':10} {'flag':4} {'opt':3} {'seed':>4}  outcome")
    for r in results:
        shown = {k: v for k, v in r.items() if k not in ("case", "flag", "seed", "optimised")}
        opt = "on" if r.get("optimised", True) else "off"
        print(f"{r['case']:10} {r['flag']:4} {opt:3} {r['seed']:>4}  {json.dumps(shown, default=float)}")


if __name__ == "__main__":
    main()
