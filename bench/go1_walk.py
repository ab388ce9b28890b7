"""Go1 walks: does a Go1 trained by strl_jax follow joystick commands, and how soon against MuJoCo
Playground's own training path at equal wall time on the same machine?

Task: Playground's `Go1JoystickFlatTerrain` with its full command ranges, observation noise and
the task's domain randomiser, 1000-step episodes. One invocation, every run in its own subprocess,
one after another:
  1. strl_jax: the preset (`--preset`, default Go1JoystickFlatTerrain_cpu, plus `--set`
     overrides) for each of `--seeds`, `--minutes` of wall time each, measured from the start of
     the worker process (imports, env construction and compilation count). Checkpoints every
     `--checkpoint-minutes` of that clock and one when the time is up (the run then stops). No
     evaluation during training.
  2. the peer (`--no-peer` skips it): brax PPO 0.14.2 as Playground trains the task (its published
     Go1 settings, MJX `impl: jax`, `wrap_for_brax_training`, the domain randomiser; the
     `playground` worker of bench/vs_playground.py, with the jax >= 0.8 substitution of
     bench/vs_brax.py), resized to strl_jax's env count (or `--peer-envs`) as vs_playground.py
     resizes for CPUs (bench/playground_settings.py: batch_size shrinks with num_envs, a training
     step keeps Playground's unrolls, minibatches and epochs; every env is reset every 280 steps as at
     Playground's sizes). `--peer-minutes` each (default twice `--minutes`, so that "the peer does
     not reach the target within 2x strl_jax's time" can be stated) for each of `--peer-seeds`.
     brax calls back after every reset interval (`num_evals` periods with `run_evals=False`: brax
     runs no evaluation either); its policy params are saved on the same wall-clock cadence.
  3. after each run's training (so that evaluation costs neither library wall time), every
     checkpoint is evaluated the same way with strl_jax's evaluation code
     (`strl_jax.train_loops.evaluation.deterministic_episodes` on a strl_jax `VecEnv`): the
     unmodified task (Playground's default config: reward weights, command ranges, noise; the
     task's randomiser; MJX `impl: jax`; no action clipping by the env), `--eval-envs` envs, one
     `--episode-length`-step episode each, the same env keys (`--eval-seed`) for every checkpoint
     of every run, deterministic actions (strl_jax: the policy's mean action as its own evaluation
     takes it, loaded with `strl_jax.inference.load_policy`; brax:
     `make_inference_fn(...)(params, deterministic=True)`, Playground's `state` /
     `privileged_state` fed from strl_jax's `policy` / `critic` groups). Per checkpoint:
     `velrmsd` (root mean square over alive steps of ||(vx, vy, yaw rate) in the base frame -
     command||), `falls` (fraction of episodes that ended before the episode length), the return
     under the task's reward and, when the strl_jax preset changes reward weights
     (`env.playground.reward_config...`), the return under the trained reward too (an env with
     only those overrides, same keys: the same trajectories).
A run reaches the target at its first checkpoint with velrmsd <= `--target` (0.35) and falls <=
`--max-falls` (0.05); its time to target is that checkpoint's wall seconds since its process
started, its steps to target the env steps trained by then.

Written to `--out`: runs.json (every run with its checkpoints and their evaluations, rewritten
after every training and every evaluation, so a killed invocation keeps what finished),
summary.md (the tables printed at the end: per run, then min / median / max over seeds, the
ratio strl_jax time to target / peer time to target, and each run's first checkpoint at or above
the peer's final evaluation return) and go1_walk.png (velrmsd and return against
wall time and env steps, the target line, strl_jax's seeds in blues, the peer's in oranges; hollow
markers: falls above `--max-falls`). runs/ holds the run folders and checkpoints, logs/ the
workers' output. `--eval-only` re-evaluates the checkpoints listed in an existing runs.json.
`--resume` continues an invocation that was stopped (the whole benchmark takes five hours and its
evaluations): the runs whose training finished are kept; a strl_jax run that was cut continues
from its newest checkpoint in a new process (`train --resume`, exact), its clock counting on from
that checkpoint's wall time (the training after it is lost, not counted); the peer's runs are
trained again from the start. `--resume` with a longer `--minutes` and otherwise the same
arguments trains each finished strl_jax run on from its last checkpoint to the new time, and
evaluates all its checkpoints again. Each run records the machine it trained on, and the summary names
them when they differ, and the points where a run was continued.

    # the benchmark: 3 x 60 minutes of strl_jax, 120 minutes of the peer, then the evaluations
    python bench/go1_walk.py --out /tmp/go1_walk
    # after a stop: the same arguments, the same --out; finished runs are kept
    python bench/go1_walk.py --out /tmp/go1_walk --resume
    # in parts: the peer first, then the seeds (each part keeps what the earlier ones finished)
    python bench/go1_walk.py --out /tmp/go1_walk --only playground-seed1
    python bench/go1_walk.py --out /tmp/go1_walk --resume --only strl_jax-seed1 strl_jax-seed2
    # the finished strl_jax runs trained on to 120 minutes (the peer's kept as they were)
    python bench/go1_walk.py --out /tmp/go1_walk --resume --minutes 120
    # another recipe: the published GPU preset at CPU size, strl_jax only
    python bench/go1_walk.py --preset Go1JoystickFlatTerrain --set env.num_envs=512 \\
        --set runner.num_steps_per_env=24 --set algorithm.num_mini_batches=4 --no-peer --out /tmp/go1_gpu
    # smoke test of the whole pipeline (a few minutes: one seed each, 32 envs, short evaluations)
    python bench/go1_walk.py --smoke --preset Go1JoystickFlatTerrain --out /tmp/go1_walk_smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pickle
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from brax_mapping import override, protocol_overrides, steps_per_training_step, unrolls_per_training_step
from common import (
    REPO_DIR,
    StopRun,
    child_environment,
    fmt,
    format_table,
    machine_info,
    run_worker,
    strl_worker,
    write_json,
    xla_cpu_defaults,
)
from learning_curves import process_start
from playground_settings import bench_settings, brax_schedule, published_settings
from vs_brax import NETWORK_KEYS, parse_sets
from vs_playground import playground_worker

TASK = "Go1JoystickFlatTerrain"  # the task of a run recorded before runs named their task
# Playground's locomotion joystick tasks, whose commands (vx, vy, yaw rate) the evaluation tracks.
LEGGED_TASKS = (
    "Go1JoystickFlatTerrain",
    "Go1JoystickRoughTerrain",
    "SpotFlatTerrainJoystick",
    "BarkourJoystick",
    "BerkeleyHumanoidJoystickFlatTerrain",
    "BerkeleyHumanoidJoystickRoughTerrain",
    "G1JoystickFlatTerrain",
    "G1JoystickRoughTerrain",
    "T1JoystickFlatTerrain",
    "T1JoystickRoughTerrain",
    "Op3Joystick",
    "ApolloJoystickFlatTerrain",
    "H1JoystickGaitTracking",
)
DEFAULT_PRESET = "Go1JoystickFlatTerrain_cpu"
# strl_jax's runner.max_iterations: high enough that the time limit ends every run.
MAX_ITERATIONS = 1_000_000
# An upper bound of the peer's env steps per second, for its env-step budget (brax needs one): the
# time limit ends the run long before (on a GPU, raise it with --peer-max-sps).
PEER_MAX_SPS = 200_000
# --smoke: whatever is not given explicitly (the strl_jax preset gets env.num_envs=32 first).
SMOKE = dict(
    seeds=[1],
    peer_seeds=[1],
    minutes=3.0,
    peer_minutes=4.0,
    checkpoint_minutes=0.5,
    eval_envs=4,
    episode_length=50,
)
CHECKPOINTS_FILE = "checkpoints.jsonl"
DEFAULT_TARGET = 0.35  # Go1's: a third of its standing velrmsd (1.05), for records made before
TERMINATION_REWARD = "termination_reward"  # env.termination_reward in a run's trained reward


def record_task(record: dict) -> str:
    return record.get("task", TASK)


def records_task(records: list[dict]) -> str:
    """The invocation's task (every run trains the same one)."""
    return record_task(records[0]) if records else TASK


def records_contacts(records: list[dict]) -> str:
    """The heightfield contact rule (`env.hfield_contacts`) of the invocation's strl_jax runs, under
    which its standing robot is measured too; MJX's own for runs recorded before the rule was."""
    return next((r["hfield_contacts"] for r in records if "hfield_contacts" in r), "mjx")


def plot_name(task: str) -> str:
    """go1_walk.png for Go1 (as before the benchmark took other robots), TASK_walk.png otherwise."""
    return "go1_walk.png" if task == TASK else f"{task}_walk.png"


# ---- training workers ----------------------------------------------------------------------
def record_checkpoint(run_dir: Path, entry: dict) -> None:
    """Append one checkpoint's line to the run's checkpoints.jsonl (kept if the run is killed)."""
    with open(run_dir / CHECKPOINTS_FILE, "a") as f:
        f.write(json.dumps(entry) + "\n")
    print("checkpoint " + json.dumps(entry), flush=True)


def read_checkpoints(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / CHECKPOINTS_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return out


class WallClock:
    """Checkpoint cadence and time limit on the clock of this process (seconds since it started),
    plus `offset_s`: the training time a continued run had before this process (its checkpoint's)."""

    def __init__(self, limit_s: float, every_s: float, offset_s: float = 0.0) -> None:
        self.start = process_start()
        self.offset_s = offset_s
        self.limit_s = limit_s
        self.every_s = every_s
        self.next_s = every_s * (math.floor(offset_s / every_s) + 1)
        self.over = False

    def now(self) -> float:
        return self.offset_s + time.time() - self.start

    def due(self, now: float, final: bool = False) -> bool:
        """Whether to checkpoint now: a cadence mark passed, the time is up, or the run ends."""
        self.over = now >= self.limit_s
        return final or self.over or now >= self.next_s

    def saved(self, now: float) -> None:
        while self.next_s <= now:
            self.next_s += self.every_s


def strl_train_worker(spec: dict) -> dict:
    """strl_jax's preset through `common.strl_worker` (runner.train), checkpointing on the wall
    clock: the runner offers a checkpoint after every iteration (`runner.save_interval=1`) and
    this keeps those on the cadence; after the one at the time limit the run stops. The runner's
    loop looks its checkpoint function up as `runners.runner.save_members`; it is set to the
    clock's for this call."""
    from unittest import mock

    from strl_jax.runners import runner as runner_module

    continued = spec.get("continue_from")  # a checkpoints.jsonl entry of this run, cut after it
    clock = WallClock(spec["limit_s"], spec["checkpoint_s"], continued["wall_s"] if continued else 0.0)
    run_dir = Path(spec["log_dir"])
    save_members = runner_module.save_members

    def save_on_the_clock(axis, members, state, iteration, meta):
        now = clock.now()
        if clock.due(now, final=iteration >= spec["max_iterations"]):
            save_members(axis, members, state, iteration, meta)
            entry = {"iteration": iteration, "env_steps": iteration * spec["steps_per_iteration"]}
            record_checkpoint(run_dir, {**entry, "wall_s": round(now, 3)})
            clock.saved(now)
        if clock.over:
            raise StopRun

    run_dir.mkdir(parents=True, exist_ok=True)
    kept = (
        [e for e in read_checkpoints(run_dir) if e["iteration"] <= continued["iteration"]]
        if continued
        else []
    )
    (run_dir / CHECKPOINTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in kept))
    resume = {"resume_checkpoint": continued["iteration"]} if continued else {}
    worker_spec = {**spec, **resume, "target": None, "time_limit_s": None, "stop_at_target": False}
    with mock.patch.object(runner_module, "save_members", save_on_the_clock):
        result = strl_worker(worker_spec)
    result["stop_reason"] = "time_limit" if clock.over else result.get("stop_reason")
    result["checkpoints"] = read_checkpoints(run_dir)
    return result


def peer_train_worker(spec: dict) -> dict:
    """Playground's path (vs_playground.py's worker) with a `policy_params_fn` that saves brax's
    normaliser and policy params on the wall clock; after the save at the time limit it stops."""
    import jax

    clock = WallClock(spec["limit_s"], spec["checkpoint_s"])
    run_dir = Path(spec["log_dir"])
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / CHECKPOINTS_FILE).unlink(missing_ok=True)
    budget = spec["kwargs"]["num_timesteps"]

    def policy_params_fn(current_step, _make_policy, params):
        if current_step == 0:  # brax's call before training
            return
        now = clock.now()
        if clock.due(now, final=current_step >= budget):
            path = run_dir / "checkpoints" / f"{current_step}.pkl"
            with open(path, "wb") as f:
                pickle.dump(jax.device_get((params[0], params[1])), f)  # normaliser, policy
            entry = {"step": int(current_step), "env_steps": int(current_step), "file": str(path)}
            record_checkpoint(run_dir, {**entry, "wall_s": round(now, 3)})
            clock.saved(now)
        if clock.over:
            raise StopRun

    result = playground_worker({**spec, "time_limit_s": None}, {"policy_params_fn": policy_params_fn})
    result["stop_reason"] = "time_limit" if clock.over else result.get("stop_reason")
    result["checkpoints"] = read_checkpoints(run_dir)
    result.pop("events", None)
    return result


# ---- evaluation worker ---------------------------------------------------------------------
def evaluation_env(env_cfg: Any, spec: dict, trained: dict, randomize: bool = True) -> Any:
    """The evaluation's `VecEnv`: `env_cfg`'s observation layout on the task with the `trained`
    reward's Playground overrides and `termination_reward` only ({}: Playground's defaults,
    strl_jax's `impl: jax`, no termination reward), the task's randomiser (`randomize=False`, a
    diagnostic, leaves it out), the evaluation's size and episode length, no env-side action
    clipping, no resets."""
    playground = {k: v for k, v in trained.items() if k != TERMINATION_REWARD}
    from strl_jax.envs import make_env_from_config

    cfg = dataclasses.replace(
        env_cfg,
        task=spec["task"],
        num_envs=spec["eval_envs"],
        episode_length=spec["episode_length"],
        action_repeat=1,
        clip_actions=None,
        playground=playground,
        domain_randomization=randomize,
        termination_reward=float(trained.get(TERMINATION_REWARD, 0.0)),
    )
    return make_env_from_config(cfg).replace(auto_reset="none")


def scalars(out: dict) -> dict[str, float]:
    return {k: float(v) for k, v in out.items()}


def strl_evaluations(spec: dict, write) -> list[dict]:
    """Every checkpoint of a strl_jax run, loaded with `load_policy`, acting with its mean action
    through the run's `Actor` (as the runner's evaluation does); one compiled program per env."""
    import jax

    from strl_jax.inference import load_policy
    from strl_jax.train_loops.evaluation import deterministic_episodes

    checkpoints = spec["checkpoints"]
    first = load_policy(spec["run_dir"], checkpoints[0]["iteration"])
    actor = first.actor
    if first.cfg.env.action_repeat != 1:
        raise SystemExit("error: the evaluation acts every simulator step; the preset has action_repeat != 1")
    envs = {"": evaluation_env(first.cfg.env, spec, {})}
    if spec.get("trained_reward"):
        envs["trained_"] = evaluation_env(first.cfg.env, spec, spec["trained_reward"])
    hidden = actor.initial_hidden(spec["eval_envs"])

    def program(env):
        def run(params, normalizers, key):
            act = lambda obs, h: actor.act(params, normalizers, obs, h)  # noqa: E731
            return deterministic_episodes(env, act, hidden, key)

        return jax.jit(run)

    programs = {prefix: program(env) for prefix, env in envs.items()}
    key = jax.random.PRNGKey(spec["eval_seed"])
    results = []
    for index, ckpt in enumerate(checkpoints):
        start = time.time()
        entry = dict(ckpt)
        try:
            loaded = first if index == 0 else load_policy(spec["run_dir"], ckpt["iteration"])
            for prefix, run in programs.items():
                out = scalars(jax.device_get(run(loaded.params, loaded.normalizers, key)))
                entry.update({prefix + k: v for k, v in out.items()})
        except Exception as err:  # noqa: BLE001 - a broken checkpoint must not lose the others
            entry["error"] = f"{type(err).__name__}: {err}"
        entry["eval_s"] = round(time.time() - start, 2)
        results.append(entry)
        write(results)
    return results


def peer_evaluations(spec: dict, write) -> list[dict]:
    """Every saved brax policy: `make_inference_fn(make_ppo_networks(...))(params,
    deterministic=True)` on Playground's observation keys taken from strl_jax's groups."""
    import jax
    from brax.training import types
    from brax.training.acme import running_statistics
    from brax.training.agents.ppo import networks as ppo_networks

    from strl_jax.configs.schema import EnvConfig
    from strl_jax.train_loops.evaluation import deterministic_episodes

    env = evaluation_env(EnvConfig(task=spec["task"]), spec, {})
    raw = jax.eval_shape(env.env.reset, jax.random.PRNGKey(0)).obs
    # Playground key -> the strl_jax group that is exactly that key (`state` -> policy, ...)
    groups = {keys[0]: name for name, keys in env.observe.groups if len(keys) == 1}
    if not isinstance(raw, dict) or set(raw) - set(groups):
        raise SystemExit(f"error: no strl_jax group for Playground observation keys {sorted(raw)}")
    kw = spec["peer_kwargs"]
    network = {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items() if k in NETWORK_KEYS}
    normalize = (
        running_statistics.normalize
        if kw["normalize_observations"]
        else types.identity_observation_preprocessor
    )
    ppo_network = ppo_networks.make_ppo_networks(
        {k: v.shape for k, v in raw.items()}, env.action_size, preprocess_observations_fn=normalize, **network
    )
    make_policy = ppo_networks.make_inference_fn(ppo_network)
    unused_key = jax.random.PRNGKey(0)  # deterministic actions draw nothing

    def run(params, key):
        def act(obs, hidden):
            policy = make_policy(params, deterministic=True)
            action, _ = policy({k: obs[g] for k, g in groups.items() if k in raw}, unused_key)
            return action, hidden

        return deterministic_episodes(env, act, {}, key)

    program = jax.jit(run)
    key = jax.random.PRNGKey(spec["eval_seed"])
    results = []
    for ckpt in spec["checkpoints"]:
        start = time.time()
        entry = dict(ckpt)
        try:
            with open(ckpt["file"], "rb") as f:
                params = pickle.load(f)
            entry.update(scalars(jax.device_get(program(params, key))))
        except Exception as err:  # noqa: BLE001 - a broken checkpoint must not lose the others
            entry["error"] = f"{type(err).__name__}: {err}"
        entry["eval_s"] = round(time.time() - start, 2)
        results.append(entry)
        write(results)
    return results


def standing_env_config(spec: dict) -> Any:
    """The standing robot's env: the task's defaults under the runs' heightfield contact rule."""
    from strl_jax.configs.schema import EnvConfig

    return EnvConfig(task=spec["task"], hfield_contacts=spec.get("hfield_contacts", "mjx"))


def standing_worker(spec: dict) -> dict:
    """The task's standing robot: zero action (the default pose, as Playground's joystick tasks add
    the action to it) on the unmodified task, the evaluation's envs, keys and episode length, under
    the runs' heightfield contact rule. Its velrmsd is what tracking must beat: the target is a
    third of it."""
    import jax
    import jax.numpy as jnp

    from strl_jax.train_loops.evaluation import deterministic_episodes

    start = time.time()
    env = evaluation_env(standing_env_config(spec), spec, {})
    zero = jnp.zeros((spec["eval_envs"], env.action_size))
    run = jax.jit(lambda key: deterministic_episodes(env, lambda obs, h: (zero, h), {}, key))
    out = scalars(jax.device_get(run(jax.random.PRNGKey(spec["eval_seed"]))))
    return {**out, "eval_s": round(time.time() - start, 2)}


def evaluate_worker(spec: dict, out_path: str) -> dict:
    """Evaluations of one run's checkpoints; the result file is rewritten after each one."""
    start = time.time()

    def write(results):
        write_json(out_path, {"evals": results, "eval_total_s": time.time() - start})

    evaluate = strl_evaluations if spec["library"] == "strl_jax" else peer_evaluations
    results = evaluate(spec, write)
    return {"evals": results, "eval_total_s": time.time() - start}


def worker_main(kind: str, spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    if kind == "evaluate":
        write_json(out_path, evaluate_worker(spec, out_path))
        return 0
    if kind == "standing":
        write_json(out_path, standing_worker(spec))
        return 0
    if kind == "playground":
        xla_cpu_defaults().apply_cpu_defaults()  # as importing strl_jax does, before jax is imported
        result = peer_train_worker(spec)
    else:
        result = strl_train_worker(spec)
    result["start_offset_s"] = time.time() - process_start() - result["total_s"]
    write_json(out_path, result)
    return 0


# ---- plans ---------------------------------------------------------------------------------
def trained_reward(playground: dict, termination_reward: float) -> dict:
    """What the preset's reward changes: its Playground reward overrides (`reward_config.*`) and
    strl_jax's `env.termination_reward` (under that name) when it is on."""
    out = {k: v for k, v in playground.items() if k.startswith("reward_config.")}
    return out | ({TERMINATION_REWARD: termination_reward} if termination_reward else {})


def strl_plan(args: argparse.Namespace, seed: int) -> dict:
    """The strl_jax worker's spec: preset + protocol + --set, and what the summary needs."""
    from strl_jax.configs.loader import available_presets, resolve_config
    from strl_jax.envs.playground_env import flatten

    if args.preset not in available_presets():
        raise SystemExit(
            f"error: no preset {args.preset!r} (configs/{args.preset}.yaml); e.g. --preset {TASK} with "
            "--set overrides for CPU sizes (see this script's docstring)"
        )
    protocol = protocol_overrides(seed, args.max_iterations, 0, 1) + [
        override("runner.save_interval", 1),
        override("runner.max_checkpoints_to_keep", 0),
    ]
    overrides = protocol + args.strl_overrides
    files = [str(Path(f).resolve()) for f in args.config]
    cfg = resolve_config(args.preset, config_files=files, overrides=overrides)
    if cfg.env.task not in LEGGED_TASKS:
        raise SystemExit(
            f"error: preset {args.preset!r} trains {cfg.env.task!r}; this benchmark evaluates joystick "
            f"tracking on one of {', '.join(LEGGED_TASKS)}"
        )
    playground = flatten(cfg.env.playground)
    steps = cfg.env.num_envs * cfg.runner.num_steps_per_env * cfg.env.action_repeat
    return {
        "library": "strl_jax",
        "seed": seed,
        "label": f"strl_jax-seed{seed}",
        "task": cfg.env.task,
        "num_envs": cfg.env.num_envs,
        "trained_reward": trained_reward(playground, cfg.env.termination_reward),
        "other_playground": {k: v for k, v in playground.items() if not k.startswith("reward_config.")},
        "domain_randomization": cfg.env.domain_randomization,
        "hfield_contacts": cfg.env.hfield_contacts,
        "off_terrain": cfg.env.off_terrain,  # whether a robot off a heightfield's edge counts as fallen
        "spec": {
            "task": args.preset,
            **({"config_files": files} if files else {}),  # runs recorded before: no such key
            "overrides": overrides,
            "max_iterations": cfg.runner.max_iterations,
            "steps_per_iteration": steps,
            "limit_s": args.minutes * 60,
            "checkpoint_s": args.checkpoint_minutes * 60,
        },
    }


def peer_plan(args: argparse.Namespace, seed: int, num_envs: int, task: str = TASK) -> dict:
    """The peer's ppo.train kwargs: Playground's published settings resized to `num_envs`, one
    period (brax's `num_evals` unit: a callback, no evaluation) per reset interval, a budget the
    time limit ends first."""
    pub = published_settings(task)
    limit_s = args.peer_minutes * 60
    resized, _ = bench_settings(pub, num_envs, None, None, 1, True, {})
    per_env = unrolls_per_training_step(resized) * resized["unroll_length"] * resized["action_repeat"]
    reset_every = brax_schedule(pub)["reset_every_env_steps"]
    period = max(1, round(reset_every / per_env)) if reset_every else 1  # training steps
    steps = steps_per_training_step(resized)
    periods = math.ceil(limit_s * args.peer_max_sps / (period * steps))
    kw, schedule = bench_settings(pub, num_envs, periods * period * steps, periods + 1, 1, True, {})
    kw.update(seed=seed, run_evals=False)
    return {
        "library": "playground",
        "seed": seed,
        "label": f"playground-seed{seed}",
        "task": task,
        "num_envs": num_envs,
        "schedule": schedule,
        "spec": {
            "task": task,
            "kwargs": kw,
            "playground": {"impl": "jax"},
            "domain_randomization": True,
            "limit_s": limit_s,
            "checkpoint_s": args.checkpoint_minutes * 60,
        },
    }


# ---- running -------------------------------------------------------------------------------
def planned_runs(args: argparse.Namespace) -> list[dict]:
    """strl_jax's seeds, then the peer's, at `--peer-envs` or else strl_jax's env count."""
    plans = [strl_plan(args, seed) for seed in args.seeds]
    if not args.no_peer:
        peer_envs = args.peer_envs or plans[0]["num_envs"]
        plans += [peer_plan(args, seed, peer_envs, plans[0]["task"]) for seed in args.peer_seeds]
    return plans


def train(record: dict, out: Path) -> None:
    """One run's training worker; its checkpoints from checkpoints.jsonl (kept if it failed)."""
    spec = dict(record["spec"], log_dir=str(out / "runs" / record["label"]))
    if record.get("continued"):
        spec["continue_from"] = {k: v for k, v in record["continued"][-1].items() if k != "machine"}
    record["run_dir"] = spec["log_dir"]
    kind = "strl_jax" if record["library"] == "strl_jax" else "playground"
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", kind]
    hard_limit = 1.25 * spec["limit_s"] + 1800  # a worker past its limit by this much is stuck
    print(f"[{time.strftime('%H:%M:%S')}] training {record['label']} ...", flush=True)
    result = run_worker(
        argv, spec, out / "logs", record["label"], hard_limit, child_environment(str(REPO_DIR))
    )
    if "error" in result:
        print(result["error"], flush=True)
    result.pop("checkpoints", None)
    record["train"] = result
    record["checkpoints"] = read_checkpoints(spec["log_dir"])
    last = record["checkpoints"][-1] if record["checkpoints"] else {}
    print(
        f"  {len(record['checkpoints'])} checkpoints, last at {fmt(last.get('wall_s'))} s, "
        f"{fmt(last.get('env_steps'))} env steps; train steps/s {fmt(result.get('sps'))}, stopped by "
        f"{result.get('stop_reason', 'error')}",
        flush=True,
    )


def evaluate(record: dict, args: argparse.Namespace, out: Path) -> None:
    """One run's evaluation worker, after its training (or after a kill cut its training short:
    the checkpoints its run folder lists)."""
    if not record.get("checkpoints") and record.get("run_dir"):
        record["checkpoints"] = read_checkpoints(record["run_dir"])
    if not record.get("checkpoints"):
        record["evals"], record["eval_error"] = [], "no checkpoints"
        return
    spec = {
        "library": record["library"],
        "task": record_task(record),
        "run_dir": record["run_dir"],
        "checkpoints": record["checkpoints"],
        "eval_envs": args.eval_envs,
        "episode_length": args.episode_length,
        "eval_seed": args.eval_seed,
        "trained_reward": record.get("trained_reward") or None,
        "peer_kwargs": record["spec"].get("kwargs"),
    }
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "evaluate"]
    label = record["label"] + "-eval"
    print(
        f"[{time.strftime('%H:%M:%S')}] evaluating {len(record['checkpoints'])} checkpoints of "
        f"{record['label']} ...",
        flush=True,
    )
    programs = 2 if record.get("trained_reward") else 1
    timeout = 1800 + len(record["checkpoints"]) * (60 + 240 * programs * args.episode_length / 1000)
    result = run_worker(argv, spec, out / "logs", label, timeout, child_environment(str(REPO_DIR)))
    record["evals"] = result.get("evals", [])
    record["eval_total_s"] = result.get("eval_total_s", result["wall_s"])
    record.pop("eval_error", None)
    if "error" in result:
        record["eval_error"] = result["error"]
        print(result["error"], flush=True)
    for e in record["evals"]:
        print(
            f"  {fmt(e['wall_s'])} s, {fmt(e['env_steps'])} steps: velrmsd {fmt(e.get('velrmsd'), 2)}, "
            f"falls {fmt(e.get('falls'), 1)}, return {fmt(e.get('episode_reward'))}"
            + (
                f", trained-reward return {fmt(e['trained_episode_reward'])}"
                if "trained_episode_reward" in e
                else ""
            )
            + (f" ({e['error']})" if "error" in e else ""),
            flush=True,
        )


def measure_standing(task: str, args: argparse.Namespace, out: Path, hfield_contacts: str = "mjx") -> dict:
    """The standing robot's evaluation (`standing_worker`) in its own process."""
    spec = {"task": task, "eval_envs": args.eval_envs, "episode_length": args.episode_length}
    spec.update(eval_seed=args.eval_seed, hfield_contacts=hfield_contacts)
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "standing"]
    print(f"[{time.strftime('%H:%M:%S')}] evaluating a standing {task} ...", flush=True)
    result = run_worker(argv, spec, out / "logs", "standing", 1800, child_environment(str(REPO_DIR)))
    if "error" in result:
        raise SystemExit(f"error: the standing robot's evaluation failed: {result['error']}")
    print(
        f"  standing: velrmsd {fmt(result.get('velrmsd'), 2)}, falls {fmt(result.get('falls'), 2)}",
        flush=True,
    )
    sizes = {"eval_envs": args.eval_envs, "episode_length": args.episode_length}
    return {**result, "task": task, **sizes, "hfield_contacts": hfield_contacts}


def set_target(args: argparse.Namespace, standing: dict | None) -> None:
    """`--target` as given, else a third of the standing robot's velrmsd (Go1: 1.05 -> 0.35)."""
    if args.target is None:
        velrmsd = (standing or {}).get("velrmsd")
        args.target = round(velrmsd / 3, 3) if velrmsd else DEFAULT_TARGET


def finished_runs(out: Path, plans: list[dict]) -> dict[str, dict]:
    """The runs of the invocation saved in `out` whose training ended without an error, by label;
    each must have been planned as now (same preset, overrides, minutes, peer settings)."""
    path = out / "runs.json"
    if not path.is_file():
        raise SystemExit(f"error: --resume needs {path} from an earlier invocation with this --out")
    saved = {r["label"]: r for r in json.loads(path.read_text())["runs"]}
    finished = {}
    for plan in plans:
        record = saved.get(plan["label"])
        if record is None or "train" not in record or "error" in record["train"]:
            continue
        if extends(plan, record):
            continue  # trained on by started_before's continuation
        if record["spec"] != json.loads(json.dumps(plan["spec"])):
            raise SystemExit(
                f"error: --resume: {plan['label']} was trained with {json.dumps(record['spec'])}, this "
                f"invocation plans {json.dumps(plan['spec'])}; resume with the arguments it was started with"
            )
        finished[plan["label"]] = {**record, "machine": record.get("machine") or {"cpu_model": "unknown"}}
    return finished


def extends(plan: dict, record: dict) -> bool:
    """Whether `plan` trains the finished strl_jax run `record` on: planned as it was except for
    a longer `--minutes`, its training ended by the clock without an error. Such a run continues
    from its last checkpoint (`train --resume`, exact), as rsl_rl's runner resumes a run with a
    larger iteration budget, and counts as one run of the longer time."""
    train = record.get("train") or {}
    if plan.get("library") != "strl_jax" or train.get("stop_reason") != "time_limit":
        return False
    was, now = record["spec"], json.loads(json.dumps(plan["spec"]))
    shorter = {**now, "limit_s": was.get("limit_s")}
    return was == shorter and now.get("limit_s", 0) > was.get("limit_s", 0) and "error" not in train


def continuation(run_dir: Path) -> dict | None:
    """Where a cut strl_jax run continues: its newest checkpoints.jsonl entry whose checkpoint
    folder is on disk (a checkpoint being written when the run was killed is not listed yet)."""
    for entry in reversed(read_checkpoints(run_dir)):
        if (run_dir / "checkpoints" / str(entry["iteration"])).is_dir():
            return entry
    return None


def started_before(plan: dict, saved: dict) -> dict | None:
    """The continuation point of a planned strl_jax run that an earlier invocation with this --out
    started as now planned and did not finish; None where it must train from the start."""
    record = next((r for r in saved.get("runs", []) if r["label"] == plan["label"]), None)
    if plan["library"] != "strl_jax" or record is None:
        return None
    if "train" in record:
        if not extends(plan, record):
            return None
    elif record["spec"] != json.loads(json.dumps(plan["spec"])):
        return None
    cut = continuation(Path(plan["run_dir"]))
    if cut is None:
        return None
    return {**cut, "before": {k: record[k] for k in ("machine", "continued") if k in record}}


def selected_runs(plans: list[dict], finished: dict[str, dict], only: list[str] | None) -> list[dict]:
    """The plans this invocation keeps or trains: all of them, or with `--only` the named runs and
    the finished ones (so that the summary still shows them); an unplanned name is an error."""
    if not only:
        return plans
    labels = [plan["label"] for plan in plans]
    unknown = [label for label in only if label not in labels]
    if unknown:
        raise SystemExit(
            f"error: --only {' '.join(unknown)}: not planned; the planned runs: {' '.join(labels)}"
        )
    return [plan for plan in plans if plan["label"] in only or plan["label"] in finished]


def runs_on_record(plans: list[dict], finished: dict[str, dict], started: set[str]) -> list[dict]:
    """What runs.json holds while the invocation runs, in plan order: every run kept from before
    (also those planned after the one training now) and the ones this invocation has started."""
    return [finished.get(p["label"], p) for p in plans if p["label"] in finished or p["label"] in started]


# ---- summary -------------------------------------------------------------------------------
def reached(record: dict, target: float, max_falls: float) -> dict | None:
    """The run's first evaluated checkpoint with velrmsd <= target and falls <= max_falls."""
    for e in record.get("evals", []):
        if e.get("velrmsd") is not None and e["velrmsd"] <= target and e.get("falls", 1.0) <= max_falls:
            return e
    return None


RUN_HEADERS = [
    "library",
    "seed",
    "checkpoints",
    "last s",
    "last env steps",
    "time to target s",
    "steps to target",
    "final velrmsd",
    "best velrmsd",
    "final falls",
    "final return",
    "final return (trained reward)",
]
SPREAD_HEADERS = [
    "library",
    "runs at target",
    "time to target s (min / median / max)",
    "steps to target (min / median / max)",
    "final velrmsd (min / median / max)",
    "final falls (min / median / max)",
    "final return (min / median / max)",
]


def evaluated(record: dict) -> list[dict]:
    return [e for e in record.get("evals", []) if e.get("velrmsd") is not None]


def run_row(record: dict, target: float, max_falls: float) -> list:
    evals = evaluated(record)
    last = evals[-1] if evals else {}
    hit = reached(record, target, max_falls) or {}
    return [
        record["library"],
        str(record["seed"]),
        len(evals),
        last.get("wall_s"),
        last.get("env_steps"),
        hit.get("wall_s"),
        hit.get("env_steps"),
        fmt(last.get("velrmsd"), 2) if last else "-",
        fmt(min(e["velrmsd"] for e in evals), 2) if evals else "-",
        fmt(last.get("falls"), 1) if last else "-",
        last.get("episode_reward"),
        last.get("trained_episode_reward"),
    ]


def spread(values: list[float], digits: int = 1) -> str:
    """min / median / max; math.inf (a run that never reached the target) shows as `never`."""
    if not values:
        return "-"
    picks = (min(values), statistics.median(values), max(values))
    return " / ".join("never" if math.isinf(v) else fmt(float(v), digits) for v in picks)


def to_target(records: list[dict], key: str, target: float, max_falls: float) -> list[float]:
    """`key` (wall_s or env_steps) at the target for every run with evaluations, inf where a run
    never reached it: medians then count the runs that did not get there."""
    out = []
    for r in records:
        if evaluated(r):
            hit = reached(r, target, max_falls)
            out.append(math.inf if hit is None else hit[key])
    return out


def spread_row(library: str, records: list[dict], target: float, max_falls: float) -> list:
    times = to_target(records, "wall_s", target, max_falls)
    finals = [evaluated(r)[-1] for r in records if evaluated(r)]
    return [
        library,
        f"{sum(not math.isinf(t) for t in times)}/{len(records)}",
        spread(times),
        spread(to_target(records, "env_steps", target, max_falls)),
        spread([f["velrmsd"] for f in finals], 2),
        spread([f["falls"] for f in finals], 1),
        spread([f["episode_reward"] for f in finals]),
    ]


def comparison_lines(records: list[dict], args: argparse.Namespace) -> list[str]:
    """strl_jax's median time to target over the peer's (medians over all seeds, a seed that never
    reached the target counting as infinitely slow), or why there is no ratio."""
    goal = f"velrmsd <= {args.target} with falls <= {args.max_falls}"
    medians: dict[str, float | None] = {}
    lines = []
    for library in ("strl_jax", "playground"):
        runs = [r for r in records if r["library"] == library]
        times = to_target(runs, "wall_s", args.target, args.max_falls)
        if not runs:
            continue
        if not times:
            lines.append(f"{library}: no evaluated checkpoints")
            continue
        medians[library] = statistics.median(times)
        hits = sum(not math.isinf(t) for t in times)
        line = f"{library}: {hits}/{len(runs)} seeds reached {goal}"
        if hits == 0:
            line += f"; never within {fmt(longest(runs))} s"
        elif math.isinf(medians[library]):
            line += f"; the median seed did not reach it within {fmt(longest(runs))} s"
        else:
            line += f"; median time to target {fmt(medians[library])} s"
        lines.append(line)
    strl, peer = medians.get("strl_jax"), medians.get("playground")
    if strl is None or peer is None:
        return lines
    peer_runs = [r for r in records if r["library"] == "playground"]
    strl_runs = [r for r in records if r["library"] == "strl_jax"]
    if not math.isinf(strl) and not math.isinf(peer):
        lines.append(f"time to target strl_jax / playground (medians): {strl / peer:.2f}")
    elif not math.isinf(strl):
        within = longest(peer_runs)
        lines.append(
            f"the peer's median seed never reached it within {fmt(within)} s = {within / strl:.1f}x "
            f"strl_jax's median time to target (ratio strl_jax / playground < {strl / within:.2f})"
        )
    elif not math.isinf(peer):
        within = longest(strl_runs)
        lines.append(
            f"strl_jax's median seed did not reach it within {fmt(within)} s (ratio > {within / peer:.2f})"
        )
    else:
        lines.append("neither library reached the target: no ratio")
    return lines


def first_return_at_least(record: dict, value: float) -> dict | None:
    """The run's first evaluated checkpoint whose return (the task's reward) is >= value."""
    for e in evaluated(record):
        if e.get("episode_reward") is not None and e["episode_reward"] >= value:
            return e
    return None


def peer_return_lines(records: list[dict]) -> list[str]:
    """When the sizes differ (a GPU run against Playground's published size), the peer's final
    evaluation return is the other yardstick: each run's first checkpoint at or above it."""
    peers = [r for r in records if r["library"] == "playground" and evaluated(r)]
    if not peers or not any(r["library"] == "strl_jax" and evaluated(r) for r in records):
        return []
    value = statistics.median(evaluated(r)[-1]["episode_reward"] for r in peers)
    lines = [f"the peer's final evaluation return (median over its seeds): {value:.1f}"]
    for r in records:
        if not evaluated(r):
            continue
        hit = first_return_at_least(r, value)
        when = (
            f"at {hit['wall_s']:,.0f} s, {hit['env_steps']:,} env steps"
            if hit
            else f"not reached within {evaluated(r)[-1]['wall_s']:,.0f} s"
        )
        lines.append(f"  {r['label']} ({r.get('num_envs', '?')} envs): return >= {value:.1f} {when}")
    return lines


def longest(records: list[dict]) -> float | None:
    """The latest evaluated checkpoint's wall time over `records`."""
    times = [evaluated(r)[-1]["wall_s"] for r in records if evaluated(r)]
    return max(times) if times else None


def plot(records: list[dict], path: Path, target: float, max_falls: float) -> Path | None:
    """velrmsd and return against wall time and env steps, one line per run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), squeeze=False)
    families = {"strl_jax": plt.cm.Blues, "playground": plt.cm.Oranges}
    for library, cmap in families.items():
        runs = [r for r in records if r["library"] == library]
        for i, r in enumerate(runs):
            evals = evaluated(r)
            if not evals:
                continue
            color = cmap(0.9 - 0.45 * i / max(len(runs) - 1, 1))
            for row, y_key in enumerate(("velrmsd", "episode_reward")):
                for col, x_key in enumerate(("wall_s", "env_steps")):
                    ax = axes[row][col]
                    xs = [e[x_key] for e in evals]
                    ys = [e[y_key] for e in evals]
                    label = f"{library} seed {r['seed']}" if row == col == 0 else None
                    ax.plot(xs, ys, color=color, label=label)
                    upright = [e.get("falls", 1.0) <= max_falls for e in evals]
                    faces = [color if ok else "none" for ok in upright]
                    ax.scatter(xs, ys, s=18, facecolors=faces, edgecolors=[color] * len(xs), zorder=3)
    for row, y_label in enumerate(("velrmsd", "episode return (task reward)")):
        for col, x_label in enumerate(("wall seconds since process start", "env steps")):
            ax = axes[row][col]
            ax.set_xlabel(x_label)
            ax.set_ylabel(y_label)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.axhline(
                    target, color="k", linestyle="--", linewidth=1, label="target" if col == 0 else None
                )
    axes[0][0].legend(fontsize="small")
    fig.suptitle(
        f"{records_task(records)}: deterministic evaluation of every checkpoint (hollow: falls > {max_falls})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(out: Path, info: dict, records: list[dict], args: argparse.Namespace) -> str:
    """runs.json (atomically), summary.md and the PNG from what has finished; returns the summary."""
    write_json(out / "runs.json.tmp", {**info, "runs": records})
    (out / "runs.json.tmp").replace(out / "runs.json")
    rows = [run_row(r, args.target, args.max_falls) for r in records]
    spreads = [
        spread_row(lib, [r for r in records if r["library"] == lib], args.target, args.max_falls)
        for lib in ("strl_jax", "playground")
        if any(r["library"] == lib for r in records)
    ]
    notes = [
        f"{records_task(records)}, unmodified task, {args.eval_envs} envs x one "
        f"{args.episode_length}-step episode per "
        f"checkpoint (deterministic actions, the same env keys throughout). Target: the first checkpoint "
        f"with velrmsd <= {args.target} and falls <= {args.max_falls}; times are wall seconds since the "
        "training process started (evaluation excluded).",
    ]
    standing = info.get("standing")
    if standing:
        notes.append(
            f"A standing robot (zero action, the default pose) scores velrmsd {fmt(standing['velrmsd'], 2)} "
            f"with falls {fmt(standing['falls'], 2)} on the same episodes"
            + (" (C MuJoCo's heightfield contacts)." if standing.get("hfield_contacts") == "mujoco" else ".")
        )
    machines = {r["label"]: r["machine"]["cpu_model"] for r in records if r.get("machine")}
    if len(set(machines.values())) > 1:
        notes.append(
            "The runs were trained in more than one process of a resumed invocation, on: "
            + "; ".join(f"{label} {cpu}" for label, cpu in machines.items())
            + "."
        )
    continued = [r for r in records if r.get("continued")]
    if continued:
        notes.append(
            "Cut and continued from a checkpoint in a new process (the clock counts on from the "
            "checkpoint's wall time; the training lost after it is not counted): "
            + "; ".join(
                f"{r['label']} at " + ", ".join(f"{c['wall_s']:.0f} s" for c in r["continued"])
                for r in continued
            )
            + "."
        )
    trained = {k: v for r in records for k, v in (r.get("trained_reward") or {}).items()}
    if trained:
        notes.append(
            f"strl_jax's trained reward: Playground's with {json.dumps(trained)} "
            f"({TERMINATION_REWARD}: env.termination_reward, added on the steps that end by a fall)."
        )
    other = {k: v for r in records for k, v in (r.get("other_playground") or {}).items() if k != "impl"}
    if other:
        notes.append(f"The strl_jax preset also trains with {json.dumps(other)} (not in the evaluation).")
    text = "\n\n".join(
        [
            " ".join(notes),
            format_table(RUN_HEADERS, rows),
            "Across seeds (never: a seed that did not reach the target; medians count it as the slowest):",
            format_table(SPREAD_HEADERS, spreads),
            "\n".join(comparison_lines(records, args) + peer_return_lines(records)),
        ]
    )
    (out / "summary.md").write_text(text + "\n")
    plot(records, out / plot_name(records_task(records)), args.target, args.max_falls)
    return text


# ---- the command ---------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default=DEFAULT_PRESET, help="strl_jax preset (configs/<name>.yaml)")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="a strl_jax config file over the preset (e.g. configs/recipes/legged_cpu.yaml)",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="strl_jax override")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="strl_jax seeds (default 1 2 3)")
    p.add_argument("--minutes", type=float, default=None, help="wall minutes per strl_jax run (default 60)")
    p.add_argument(
        "--checkpoint-minutes", type=float, default=None, help="wall minutes between checkpoints (default 3)"
    )
    p.add_argument(
        "--max-iterations",
        type=int,
        default=MAX_ITERATIONS,
        help="strl_jax's runner.max_iterations (default: so many that the time limit ends the run)",
    )
    p.add_argument("--no-peer", action="store_true", help="train and evaluate strl_jax only")
    p.add_argument("--peer-seeds", type=int, nargs="+", default=None, help="peer seeds (default 1)")
    p.add_argument(
        "--peer-envs",
        type=int,
        default=None,
        help="the peer's env count (default: strl_jax's; 8192 is Playground's published size)",
    )
    p.add_argument(
        "--peer-minutes", type=float, default=None, help="wall minutes per peer run (default 2 x --minutes)"
    )
    p.add_argument(
        "--peer-max-sps",
        type=float,
        default=PEER_MAX_SPS,
        help="an upper bound of the peer's env steps/s, for brax's step budget (default 200,000)",
    )
    p.add_argument(
        "--no-eval",
        action="store_true",
        help="train only; evaluate later with --eval-only (e.g. on another machine, same --out path)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the invocation in --out: keep the runs whose training finished (evaluating them "
        "if that had not finished), train the others from the start; the arguments must plan the "
        "same runs",
    )
    p.add_argument(
        "--only",
        nargs="+",
        metavar="LABEL",
        help="train only these planned runs (e.g. playground-seed1 strl_jax-seed2); with --resume the "
        "finished ones stay in the summary, a later --resume without --only trains the rest",
    )
    p.add_argument("--eval-envs", type=int, default=None, help="evaluation envs (default 32)")
    p.add_argument(
        "--episode-length", type=int, default=None, help="evaluation episode length (default 1000)"
    )
    p.add_argument("--eval-seed", type=int, default=0, help="the evaluation's env keys")
    p.add_argument(
        "--target",
        type=float,
        default=None,
        help="velrmsd that counts as following commands (default: a third of a standing robot's)",
    )
    p.add_argument("--max-falls", type=float, default=0.05, help="largest fraction of falls at the target")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny end-to-end check: "
        + ", ".join(f"{k}={v}" for k, v in SMOKE.items())
        + ", env.num_envs=32",
    )
    p.add_argument(
        "--eval-only", action="store_true", help="re-evaluate the checkpoints in --out's runs.json"
    )
    p.add_argument("--out", default=None, help="output folder (default: a new /tmp folder)")
    p.add_argument(
        "--worker", choices=["strl_jax", "playground", "evaluate", "standing"], help=argparse.SUPPRESS
    )
    p.add_argument("worker_args", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.peer_envs is not None and args.peer_envs < 1:
        p.error(f"--peer-envs {args.peer_envs}: the peer needs at least 1 env (Playground publishes 8192)")
    defaults = dict(
        seeds=[1, 2, 3],
        peer_seeds=[1],
        minutes=60.0,
        checkpoint_minutes=3.0,
        eval_envs=32,
        episode_length=1000,
    )
    for key, value in ({**defaults, **SMOKE} if args.smoke else defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.peer_minutes is None:
        args.peer_minutes = 2 * args.minutes
    sets = (["env.num_envs=32"] if args.smoke else []) + args.set
    args.strl_overrides = [override(k, v) for k, v in parse_sets(sets).items()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args.worker, *args.worker_args)
    out = Path(args.out or f"/tmp/strl_bench_runs/go1_walk-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    info = {"machine": machine_info(), "args": {k: v for k, v in vars(args).items() if k != "worker_args"}}
    if args.eval_only:
        saved = json.loads((out / "runs.json").read_text())
        records = saved["runs"]
        # the training machine stays on record; this one only evaluates
        info = {**info, "machine": saved.get("machine", info["machine"]), "eval_machine": info["machine"]}
        # measured again with this evaluation code, as every checkpoint is
        info["standing"] = measure_standing(records_task(records), args, out, records_contacts(records))
        set_target(args, info["standing"])
        info["args"]["target"] = args.target
        for record in records:
            evaluate(record, args, out)
            write_outputs(out, info, records, args)
    else:
        plans = planned_runs(args)
        finished = finished_runs(out, plans) if args.resume else {}
        plans = selected_runs(plans, finished, args.only)
        saved = json.loads((out / "runs.json").read_text()) if args.resume else {}
        info["machine"] = saved.get("machine", info["machine"])
        info["standing"] = saved.get("standing")
        contacts = records_contacts(plans)
        if info["standing"] and info["standing"].get("hfield_contacts", "mjx") != contacts:
            info["standing"] = None  # measured under another contact rule than these runs train on
        if not info["standing"] and not args.no_eval:
            info["standing"] = measure_standing(plans[0]["task"], args, out, contacts)
        set_target(args, info["standing"])
        info["args"]["target"] = args.target
        for plan in plans:
            spec = plan["spec"]
            what = " ".join(spec["overrides"]) if "overrides" in spec else json.dumps(spec["kwargs"])
            print(f"{plan['label']}: {spec['limit_s'] / 60:g} min; {what}", flush=True)
        print(f"output in {out}", flush=True)
        started: set[str] = set()

        def save() -> None:
            write_outputs(out, info, runs_on_record(plans, finished, started), args)

        for plan in plans:
            kept = finished.get(plan["label"])
            if kept is not None:
                print(f"{plan['label']}: trained before ({kept['machine']['cpu_model']}), kept", flush=True)
                if not args.no_eval and (not kept.get("evals") or kept.get("eval_error")):
                    evaluate(kept, args, out)
                    save()
                continue
            started.add(plan["label"])
            plan["run_dir"] = str(out / "runs" / plan["label"])
            cut = started_before(plan, saved) if args.resume else None
            if cut is not None:
                before = cut.pop("before")
                plan["machine"] = before.get("machine") or machine_info()
                plan["continued"] = before.get("continued", []) + [{**cut, "machine": machine_info()}]
                print(
                    f"{plan['label']}: cut before; continues from its checkpoint at iteration "
                    f"{cut['iteration']} ({cut['wall_s']:.0f} s)",
                    flush=True,
                )
            else:
                shutil.rmtree(plan["run_dir"], ignore_errors=True)  # a resumed invocation's cut run
                plan["machine"] = machine_info()
            # a kill during training keeps this run and every finished one on record
            save()
            train(plan, out)
            save()
            if not args.no_eval:
                evaluate(plan, args, out)
                save()
        records = runs_on_record(plans, finished, started)
    text = write_outputs(out, info, records, args)
    png = plot_name(records_task(records))
    print("\n" + text + f"\n\nwritten to {out} (runs.json, summary.md, {png})")
    failed = any("error" in r.get("train", {}) or r.get("eval_error") for r in records)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
