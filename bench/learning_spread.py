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
Every worker compiles with `STRL_JAX_XLA_CPU_FAST_COMPILE=1`, as the suite does, unless the
environment sets the variable.
`ASSERTIONS` lists every learning assertion of the suite and the case that measures it (or the
benchmark that does); tests/test_learning_spread_lists.py holds the two lists and `OPTIMISED`
together.

Cases: `expert` (full-state PPO pendulum expert: eval return after 20/40/60 iterations),
`imitation` (APPO on the style reward alone, expert and APPO of the same seed), `memory` (LSTM vs
MLP on the partially observed pendulum), `students` (TPPO and Distillation students of that seed's
expert, with the teacher's return on their env), `balance` (the default inverted_pendulum preset's
best eval return), `tanh` (the tanh-Gaussian pendulum's best training return over its first),
`estimator` (EstimatorPPO's trained estimator error over the initial one's), `mirror` (the
mirror loss's symmetry error after 4 iterations), `discriminator` (APPO's discriminator weight
change in one iteration over the sum of its step rates), `reward_scale` (hopper_gpu's value loss
after one pendulum iteration), `part` (a test file's own part: its loss after 4 iterations over the
first), `dagger` (DAgger students' error after 20 iterations over the untrained one's, recurrent and
feed-forward), `pretraining` (the imitation loss over 8 pretraining iterations, last over second),
`strider` (the custom robot example's estimator error on fixed data, trained over initial),
`dataset_pull` (the pulls towards a synthetic dataset's labels: pretraining's distance to the mean
actions over that to the executed ones; RL imitation's distance, last over first, and its distances
to the labels; the filtered pull's distance, last over first, kept and left by each filter),
`go1_flat` (the small Go1JoystickFlatTerrain run: mean step reward and falls per iteration over
the last 10 iterations against iterations 2-11; needs the `playground` extra). The seed
is the config's, or for `discriminator` and `dagger` the learner's key, as their tests give it.
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
    "imitation": Case("test_amp_imitation", False),
    "memory": Case("test_recurrent", True),
    "students": Case("test_teacher_student", False),
    "balance": Case("test_training", True),
    "tanh": Case("test_tanh_gaussian", False),
    "estimator": Case("test_estimator_training", False),
    "mirror": Case("test_symmetry", False),
    "discriminator": Case("test_appo", False),
    "reward_scale": Case("test_gpu_presets", False),
    "part": Case("test_parts", False),
    "dagger": Case("test_update_options", False),
    "pretraining": Case("test_two_stage", False),
    "strider": Case("test_custom_robot_example", False),
    "dataset_pull": Case("test_two_stage", False),
    "go1_flat": Case("test_playground_training", True),
}


class Assertion(NamedTuple):
    threshold: str
    case: str | None = None  # a case of this script, or
    elsewhere: str | None = None  # the benchmark script (in bench/) whose spread sets it


# Every learning assertion of the suite (a threshold on a return, an episode length, a distance or
# an error reached by training): "module::test: what" -> its threshold and where its spread is
# measured: a case of this script, or the benchmark (or the module's own comments) that does.
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
    "test_amp_imitation::test_style_reward_alone_imitates_the_expert: angular-velocity W1": Assertion(
        "< untrained's", "imitation"
    ),
    "test_teacher_student::test_student_reaches_80_percent_of_the_teacher: teacher return": Assertion(
        ">= 180", "students"
    ),
    "test_teacher_student::test_student_reaches_80_percent_of_the_teacher: student best": Assertion(
        ">= 0.8x teacher", "students"
    ),
    "test_symmetry::test_training_with_the_mirror_loss_makes_the_policy_symmetric: symmetry": Assertion(
        "< 0.01", "mirror"
    ),
    "test_appo::test_iteration_trains_the_discriminator_and_feeds_raw_data: weight change": Assertion(
        "median > 0.8x the step rates' sum, largest < 1.1x", "discriminator"
    ),
    "test_gpu_presets::test_gpu_preset_settings_train_an_iteration_at_a_small_size: value loss": Assertion(
        "in (2000, 8000)", "reward_scale"
    ),
    "test_parts::test_a_part_from_a_test_file_trains_and_logs: part loss": Assertion(
        "< 0.5x the first", "part"
    ),
    "test_update_options::test_dagger_learns_from_the_last_rollouts[True]: student error": Assertion(
        "< 0.5x the untrained", "dagger"
    ),
    "test_update_options::test_dagger_learns_from_the_last_rollouts[False]: student error": Assertion(
        "< 0.5x the untrained", "dagger"
    ),
    "test_two_stage::test_pretraining_defaults_are_the_head_start_and_st_rl_is_an_option: imitation": (
        Assertion("< 0.9x the second iteration's", "pretraining")
    ),
    "test_custom_robot_example::test_the_estimator_learns_the_base_velocity_on_fixed_data: error": (
        Assertion("< 0.75x the initial", "strider")
    ),
    "test_two_stage::test_pretraining_on_expert_episodes_gives_a_head_start: eval return": Assertion(
        ">= 150 and >= RL alone + 25", elsewhere="bench/two_stage.py"
    ),
    "test_two_stage::test_imitation_pulls_towards_the_chosen_labels: distance to the labels": Assertion(
        "< 0.6x that to the actions", "dataset_pull"
    ),
    "test_two_stage::test_rl_imitation_carries_the_pull_past_the_switch_and_resumes_exactly: distance": (
        Assertion("last < 0.6x the first", "dataset_pull")
    ),
    "test_two_stage::test_rl_imitation_carries_the_pull_past_the_switch_and_resumes_exactly: labels": (
        Assertion("< 0.1x the distance to the actions", "dataset_pull")
    ),
    "test_two_stage::test_rl_imitation_filter_pulls_only_towards_demonstrations_that_did_better: kept": (
        Assertion("last < 0.5x the first", "dataset_pull")
    ),
    "test_two_stage::test_rl_imitation_filter_pulls_only_towards_demonstrations_that_did_better: left": (
        Assertion("last > 0.8x the first", "dataset_pull")
    ),
    "test_playground_training::test_go1_learns_above_the_random_policy: step reward": Assertion(
        "last 10 > 2x iterations 2-11", "go1_flat"
    ),
    "test_playground_training::test_go1_learns_above_the_random_policy: falls": Assertion(
        "last 10 < 0.5x iterations 2-11", "go1_flat"
    ),
}


def run_case(case: str, seed: int, work: Path) -> dict:
    # Imported here, not at the top: the worker sets the XLA:CPU flag before strl_jax starts jax.
    from learning_runs import (
        STUDENTS,
        dagger_run,
        dagger_teacher,
        discriminator_steps,
        estimator_error_ratio,
        filtered_pull_run,
        go1_flat_ratios,
        go1_flat_run,
        gpu_preset_iteration,
        label_pull_run,
        memory_vs_feedforward,
        mirror_loss_rows,
        own_part_run,
        pendulum_balance,
        pretraining_run,
        rl_imitation_run,
        strider_estimator_run,
        student_cfg,
        style_imitation,
        tanh_gaussian_run,
        tanh_returns,
        teacher_return_on_student_env,
        train_expert,
        two_stage_overrides,
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
    if case == "mirror":
        return {"symmetry": mirror_loss_rows(work, seed)[-1]["symmetry"]}
    if case == "discriminator":
        return discriminator_steps(work, seed)
    if case == "reward_scale":
        return {"value_function": gpu_preset_iteration(work, seed)[1]["value_function"]}
    if case == "part":
        losses = [r["reward_prediction"] for r in own_part_run(work, seed).rows]
        return {"first": losses[0], "last": losses[-1], "ratio": losses[-1] / losses[0]}
    if case == "dagger":
        teacher = dagger_teacher(work / "teacher")
        runs = {name: dagger_run(teacher, recurrent, seed) for name, recurrent in
                (("recurrent", True), ("feedforward", False))}  # fmt: skip
        return {name: run["trained"] / run["untrained"] for name, run in runs.items()}
    if case == "pretraining":
        imitation = [r["imitation"] for r in pretraining_run(work, seed)["rows"]]
        return {"second": imitation[1], "last": imitation[-1], "ratio": imitation[-1] / imitation[1]}
    if case == "strider":
        return strider_estimator_run(work, seed)
    if case == "go1_flat":
        return go1_flat_ratios(go1_flat_run(work / "go1", seed)[1])
    if case == "dataset_pull":
        overrides = two_stage_overrides(work, seed)
        labels = label_pull_run(overrides, work, work / "labels")
        carried = rl_imitation_run(overrides, work, work / "carried")
        distance = [r["rl_imitation"] for r in carried["rows"][2:]]
        out = {
            "labels": labels["to_labels"] / labels["to_actions"],
            "carried_distance": distance[-1] / distance[0],
            "carried_labels": carried["to_labels"] / carried["to_actions"],
        }
        for filter_ in ("advantage", "reward"):
            for reward, name in ((1000.0, "kept"), (-1000.0, "left")):
                pulled = [
                    r["rl_imitation"] for r in filtered_pull_run(overrides, work, filter_, reward)["rows"]
                ]
                out[f"{filter_}_{name}"] = pulled[-1] / pulled[0]
        return out
    raise ValueError(f"unknown case {case!r}; choose from {CASES}")


def worker(flag: str, optimised: bool, seeds: list[int], cases: list[str], out: Path) -> None:
    """Run in a fresh process: `flag` picks strl_jax's XLA:CPU default (on) or XLA's own (off),
    `optimised` XLA's optimisations (off: `JAX_DISABLE_MOST_OPTIMIZATIONS=1`, as conftest sets)."""
    os.environ["STRL_JAX_XLA_CPU_DEFAULTS"] = "1" if flag == "on" else "0"
    os.environ.setdefault("STRL_JAX_XLA_CPU_FAST_COMPILE", "1")  # as tests/conftest.py sets it
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
