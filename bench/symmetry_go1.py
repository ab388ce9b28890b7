"""Left-right symmetry on Go1JoystickFlatTerrain: PPO with and without rsl_rl's `symmetry_cfg`,
several seeds at equal env steps, then a deterministic evaluation that measures how symmetric the
learned policy and its gait are.

Why: the Go1 and its task are mirror-symmetric about the sagittal plane, so the optimal policy is
equivariant, pi(M s) = M pi(s), with M the mirror of observations and actions
(`strl_jax.envs.symmetry.go1_joystick`). PPO alone learns this only from data; rsl_rl's symmetry
extension adds mirrored samples to every minibatch (`use_data_augmentation`) and/or a loss on the
equivariance error (`use_mirror_loss`). This script measures whether they make the policy and its
gait more symmetric and whether they change the reward at equal env steps.

Settings (each training run in its own subprocess, `python bench/common.py strl-worker`):

- ppo  the Go1JoystickFlatTerrain preset at the CPU size of `bench/go1_estimator.py`:
       `--num_envs` envs x 24 steps, 4 minibatches, 4 epochs, actor and critic [128, 128] (ELU)
       on `state` / `privileged_state`, initial noise std 0.2, no entropy bonus.
- sym  the same plus `algorithm.symmetry_cfg` with data augmentation (as IsaacLab's ANYmal
       symmetry runners) and the mirror loss, weight `--mirror_loss_coeff` (default 1.0, as
       legged_gym-style rsl_rl configs that turn the loss on use it), mirror `go1_joystick`.

Evaluation (this process; each run's last checkpoint through `strl_jax.inference.load_policy`, the
env through `strl_jax.envs.tasks.make_env_from_config` on nominal physics with noise-free
observations, one jitted `lax.scan` over `--eval_steps` steps of all envs): every command of
`COMMANDS` is held fixed in `--eval_envs` envs (random initial states). The set is closed under the
mirror (vx, vy, wz) -> (vx, -vy, -wz): straight-walking commands are their own mirror images, the
others come in pairs. Steps after an env's first termination and the first `--warmup_steps`
(the reset transient) are left out of the gait metrics. Metrics:

- eval return: the env's reward summed over the steps before the first termination (mean over
  envs; `--eval_steps` steps, not a whole 1000-step episode); fell: fraction of envs that fell.
- v err: RMS of the base-frame xy velocity minus the commanded one (m/s): does the policy walk?
  (A policy that stands still scores the RMS of the commands' xy speeds, 0.541 for `COMMANDS`.)
- E, mirror-equivariance error: sum ||pi(M s) - M pi(s)|| / sum ||pi(s)|| over every visited state
  s (all commands), pi the deterministic executed (clipped) action. It is the quantity the mirror
  loss penalises (there on the Gaussian mean, squared), read on the policy's own state
  distribution; 0 for an exactly equivariant policy, and defined whether or not the policy walks.
- SI, Robinson's symmetry index from gait analysis, SI = 100 |X_L - X_R| / (0.5 (X_L + X_R)) in %,
  between each left leg and its right partner (FL-FR, RL-RR), averaged over the pairs:
  - duty factor X: fraction of steps the foot touches the floor (the env's foot-floor contact
    sensors, `info["last_contact"]`), 2 pairs;
  - range of motion X: max - min of each joint angle (hip, thigh, calf), 6 pairs.
  `SI duty` / `SI ROM` are per episode on the straight-walking commands (vy = wz = 0, where a
  symmetric gait is expected; 0 for a perfectly symmetric one), averaged over episodes: a policy
  that limps on the left in some episodes and on the right in others is asymmetric in each,
  which means over episodes would hide. `pair SI duty` / `pair SI ROM` extend this to the
  mirrored command pairs: a symmetric policy's left leg under c does what its right leg does
  under M c, so X_L(c) (mean over episodes) is compared with X_R(M c), averaged over both orders
  and all pairs.

    python bench/symmetry_go1.py --out /tmp/symmetry_go1 --json /tmp/symmetry_go1.json   # 2 seeds, 150 it.
    python bench/symmetry_go1.py --eval_only --out /tmp/symmetry_go1   # evaluate those runs again

Prints the table (per run and mean +- std over seeds) and writes it to `<out>/table.md`, rows to
`<out>/results.json` (and to `--json`), each run's folder to `<out>/runs/`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import REPO_DIR, child_environment, format_table, machine_info, run_worker, write_json

TASK = "Go1JoystickFlatTerrain"
SETTINGS = {"ppo": "PPO", "sym": "PPO + symmetry"}
MIRROR_FUNC = "strl_jax.envs.symmetry:go1_joystick"
# (vx m/s, vy m/s, yaw rate rad/s); closed under (vx, vy, wz) -> (vx, -vy, -wz)
COMMANDS = (
    (0.5, 0.0, 0.0),
    (1.0, 0.0, 0.0),
    (0.5, 0.3, 0.0),
    (0.5, -0.3, 0.0),
    (0.5, 0.0, 0.6),
    (0.5, 0.0, -0.6),
    (0.0, 0.5, 0.0),
    (0.0, -0.5, 0.0),
    (0.0, 0.0, 0.8),
    (0.0, 0.0, -0.8),
)
# Playground Go1 leg order FR, FL, RR, RL (feet sensors and joints, 3 joints per leg)
LEFT_RIGHT_LEGS = ((1, 0), (3, 2))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="seeds (each trains both settings)")
    p.add_argument("--settings", default="ppo,sym", help="which settings, comma-separated")
    p.add_argument("--iterations", type=int, default=150, help="training iterations of every run")
    p.add_argument("--num_envs", type=int, default=256, help="training envs")
    p.add_argument("--steps_per_env", type=int, default=24, help="steps per env and iteration")
    p.add_argument("--mirror_loss_coeff", type=float, default=1.0, help="sym: symmetry_cfg.mirror_loss_coeff")
    p.add_argument("--eval_envs", type=int, default=32, help="evaluation envs per command")
    p.add_argument("--eval_steps", type=int, default=500, help="evaluation steps (0.02 s each)")
    p.add_argument("--warmup_steps", type=int, default=50, help="first steps left out of the gait metrics")
    p.add_argument("--eval_seed", type=int, default=0, help="seed of the evaluation's initial states")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    p.add_argument("--timeout", type=float, default=None, help="seconds per training run (default: none)")
    p.add_argument("--out", default="/tmp/symmetry_go1", help="output folder")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--eval_only", action="store_true", help="evaluate the runs already in <out>/runs")
    return p.parse_args(argv)


def common_overrides(args: argparse.Namespace) -> list[str]:
    """Overrides both settings get: the CPU size, no evaluation during training, logging."""
    return [
        f"runner.max_iterations={args.iterations}",
        "runner.eval_interval=0",
        "runner.save_interval=0",  # the last iteration is still saved
        "runner.print_interval=1000000",
        f"env.num_envs={args.num_envs}",
        f"runner.num_steps_per_env={args.steps_per_env}",
        "algorithm.num_mini_batches=4",
        "algorithm.num_learning_epochs=4",
        "policy.actor_hidden_dims=[128,128]",
        "policy.critic_hidden_dims=[128,128]",
        "policy.init_noise_std=0.2",
        "algorithm.entropy_coef=0.0",
        *args.set,
    ]


def symmetry_override(args: argparse.Namespace) -> str:
    """The `algorithm.symmetry_cfg` of the sym setting."""
    return (
        "algorithm.symmetry_cfg={use_data_augmentation: true, use_mirror_loss: true, "
        f"mirror_loss_coeff: {args.mirror_loss_coeff}, data_augmentation_func: '{MIRROR_FUNC}'}}"
    )


# ---- training -------------------------------------------------------------------------------------
def read_rows(log_dir: Path) -> list[dict]:
    """One run's metrics.jsonl rows."""
    path = log_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def training_summary(rows: list[dict]) -> dict[str, Any]:
    """Training return (episodes finished in the last tenth of the iterations) and timings."""
    tail = rows[-max(1, len(rows) // 10) :]
    done = [r for r in tail if r.get("mean_reward") is not None and r.get("episodes")]
    episodes = sum(r["episodes"] for r in done)
    symmetry = [r["symmetry"] for r in tail if "symmetry" in r]
    return {
        "iterations": len(rows),
        "env_steps": rows[-1]["env_steps"] if rows else None,
        "train_return": sum(r["mean_reward"] * r["episodes"] for r in done) / episodes if episodes else None,
        "train_episodes": episodes,
        "step_reward_tail": statistics.fmean(r["mean_step_reward"] for r in tail) if tail else None,
        "mirror_loss_tail": statistics.fmean(symmetry) if symmetry else None,
        "first_iteration_s": rows[0]["iteration_time"] if rows else None,
        "iteration_s": statistics.median(r["iteration_time"] for r in rows[1:]) if len(rows) > 1 else None,
    }


def train_one(args: argparse.Namespace, setting: str, seed: int, common: list[str], out: Path) -> dict:
    """Train one setting and seed in a worker subprocess."""
    name = f"{setting}_s{seed}"
    log_dir = out / "runs" / name
    overrides = [*common, f"seed={seed}"] + ([symmetry_override(args)] if setting == "sym" else [])
    spec = {"task": TASK, "overrides": overrides, "log_dir": str(log_dir)}
    env = child_environment()
    env["STRL_JAX_CACHE_DIR"] = os.environ.get("STRL_JAX_CACHE_DIR", "/tmp/strl_jax_cache")
    worker = [sys.executable, str(REPO_DIR / "bench" / "common.py"), "strl-worker"]
    result = run_worker(worker, spec, out / "logs", name, args.timeout, env=env)
    result = {k: v for k, v in result.items() if k in ("error", "wall_s", "total_s", "log", "device")}
    rows = read_rows(log_dir)
    result.update(setting=setting, seed=seed, run_dir=str(log_dir), overrides=overrides)
    result["training"] = training_summary(rows) if rows else None
    return result


# ---- evaluation -----------------------------------------------------------------------------------
def mirror_pairs() -> list[tuple[int, int]]:
    """Index pairs (c, M c) of `COMMANDS` with c != M c."""
    index = {c: i for i, c in enumerate(COMMANDS)}
    pairs = []
    for i, (vx, vy, wz) in enumerate(COMMANDS):
        j = index[(vx, -vy + 0.0, -wz + 0.0)]
        if i < j:
            pairs.append((i, j))
    return pairs


def make_rollout(loaded: Any, args: argparse.Namespace):
    """A jitted `(params, normalizers, key) -> per-step records [T, N, ...]` of the deterministic
    policy, every env holding its command of `COMMANDS` for the whole rollout."""
    import jax
    import jax.numpy as jnp

    from strl_jax.agents.symmetry import symmetry_env
    from strl_jax.envs.symmetry import go1_joystick
    from strl_jax.envs.tasks import make_env_from_config
    from strl_jax.native_episodes import nominal_env_config

    cfg = nominal_env_config(loaded.cfg.env, episode_length=args.eval_steps + 1)
    env = make_env_from_config(cfg, num_envs=len(COMMANDS) * args.eval_envs)
    sym_env = symmetry_env(env, {k: v[0] for k, v in env.observation_shapes().items()})
    actor = loaded.actor
    group = actor.obs_group
    commands = jnp.repeat(jnp.asarray(COMMANDS, jnp.float32), args.eval_envs, axis=0)

    def hold(state: Any) -> tuple[Any, dict]:
        """Every env's command set to its own, never resampled, and shown in the observation."""
        brax = state.brax_state
        info = dict(brax.info)
        info["command"] = commands.astype(info["command"].dtype)
        info["steps_until_next_cmd"] = jnp.full_like(info["steps_until_next_cmd"], 2**30)
        obs = dict(brax.obs)
        size = obs["state"].shape[-1]
        obs["state"] = obs["state"].at[:, size - 3 :].set(info["command"])
        obs["privileged_state"] = obs["privileged_state"].at[:, size - 3 : size].set(info["command"])
        brax = brax.replace(info=info, obs=obs)
        return state.replace(brax_state=brax), env.observe(brax)

    def rollout(params: Any, normalizers: Any, key: jax.Array) -> dict:
        def policy(x: jax.Array) -> jax.Array:
            return actor.act(params, normalizers, {group: x}, {})[0]

        def step(carry: tuple, _: Any) -> tuple:
            state, obs = carry
            s = obs[group]
            action = policy(s)
            mirrored_obs, mirrored_action = go1_joystick({group: s}, action, sym_env)
            n = s.shape[0]
            of_mirror = policy(mirrored_obs[group][n:])
            brax = state.brax_state
            record = {
                "joints": brax.data.qpos[:, 7:],
                "contact": brax.info["last_contact"],
                "eq_num": jnp.linalg.norm(of_mirror - mirrored_action[n:], axis=-1),
                "eq_den": jnp.linalg.norm(action, axis=-1),
            }
            state, res = env.step(state, action)
            record.update(
                reward=res.reward,
                done=res.terminated | res.truncated,
                terminated=res.terminated,
                velocity=res.probe["velocity"],
            )
            return hold(state), record

        start = hold(env.reset(key)[0])
        return jax.lax.scan(step, start, None, length=args.eval_steps)[1]

    return jax.jit(rollout)


def robinson_si(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Robinson's symmetry index in % (0 where both are 0)."""
    mean = 0.5 * (left + right)
    return np.where(mean > 0, 100.0 * np.abs(left - right) / np.maximum(mean, 1e-12), 0.0)


def leg_features(steps: dict, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per env: duty factor of each foot [N, 4] and range of motion of each joint [N, 12] over
    its valid steps (NaN for an env without any)."""
    count = valid.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        duty = (steps["contact"] * valid[..., None]).sum(0) / count[:, None]
    joints = steps["joints"]
    high = np.where(valid[..., None], joints, -np.inf).max(0)
    low = np.where(valid[..., None], joints, np.inf).min(0)
    rom = np.where(count[:, None] > 0, high - low, np.nan)
    return duty, rom


def pair_si(duty: np.ndarray, rom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SI of left vs right of `[..., 4]` duty factors and `[..., 12]` ranges of motion, averaged
    over the leg pairs (and the 3 joints of a leg)."""
    si_duty = np.mean([robinson_si(duty[..., left], duty[..., right]) for left, right in LEFT_RIGHT_LEGS], 0)
    si_rom = np.mean(
        [
            robinson_si(rom[..., 3 * left + j], rom[..., 3 * right + j])
            for left, right in LEFT_RIGHT_LEGS
            for j in range(3)
        ],
        0,
    )
    return si_duty, si_rom


def gait_metrics(steps: dict, args: argparse.Namespace) -> dict[str, Any]:
    """The evaluation's numbers from the rollout's records (numpy, [T, N, ...])."""
    done = steps["done"].astype(bool)
    alive = np.concatenate([np.ones_like(done[:1]), np.cumprod(~done[:-1], 0)], 0).astype(bool)
    returns = (steps["reward"] * alive).sum(0)
    fell = (steps["terminated"] & alive).any(0)
    valid = alive.copy()
    valid[: args.warmup_steps] = False
    command = np.repeat(np.asarray(COMMANDS), args.eval_envs, axis=0)
    err = np.square(steps["velocity"][..., :2] - command[None, :, :2]).sum(-1)
    v_err = math.sqrt((err * valid).sum() / max(valid.sum(), 1))
    eq = float((steps["eq_num"] * alive).sum() / (steps["eq_den"] * alive).sum())

    duty, rom = leg_features(steps, valid)
    per_command = np.arange(len(COMMANDS)).repeat(args.eval_envs)
    straight = [i for i, (_, vy, wz) in enumerate(COMMANDS) if vy == 0 and wz == 0]
    rows = np.isin(per_command, straight)
    si_duty, si_rom = pair_si(duty[rows], rom[rows])
    # mirrored pairs: X_L(c) against X_R(M c) on means over the episodes of each command
    mean_duty = np.stack([np.nanmean(duty[per_command == i], 0) for i in range(len(COMMANDS))])
    mean_rom = np.stack([np.nanmean(rom[per_command == i], 0) for i in range(len(COMMANDS))])
    left_feet, right_feet = [1, 3], [0, 2]
    left_joints, right_joints = [3, 4, 5, 9, 10, 11], [0, 1, 2, 6, 7, 8]
    pair_duty, pair_rom = [], []
    for i, j in mirror_pairs():
        for a, b in ((i, j), (j, i)):  # left legs under command a against right legs under M a = b
            pair_duty.append(np.mean(robinson_si(mean_duty[a, left_feet], mean_duty[b, right_feet])))
            pair_rom.append(np.mean(robinson_si(mean_rom[a, left_joints], mean_rom[b, right_joints])))
    return {
        "eval_return": float(returns.mean()),
        "fell": float(fell.mean()),
        "v_err": v_err,
        "equivariance_error": eq,
        "si_duty": float(np.nanmean(si_duty)),
        "si_rom": float(np.nanmean(si_rom)),
        "pair_si_duty": float(np.nanmean(pair_duty)),
        "pair_si_rom": float(np.nanmean(pair_rom)),
        "duty_straight": [float(x) for x in np.nanmean(duty[rows], 0)],
        "rom_straight": [float(x) for x in np.nanmean(rom[rows], 0)],
    }


def evaluate_runs(results: list[dict], args: argparse.Namespace) -> float:
    """Evaluate every trained run in place (`result["eval"]`); returns the seconds it took."""
    import jax

    from strl_jax.inference import load_policy

    start = time.time()
    rollout = None
    for result in results:
        if result.get("error") or not result.get("training"):
            continue
        t0 = time.time()
        loaded = load_policy(result["run_dir"])
        rollout = rollout or make_rollout(loaded, args)
        steps = jax.device_get(rollout(loaded.params, loaded.normalizers, jax.random.PRNGKey(args.eval_seed)))
        result["eval"] = gait_metrics({k: np.asarray(v) for k, v in steps.items()}, args)
        result["eval_s"] = time.time() - t0
        print(f"    eval {result['setting']} seed {result['seed']}: {result['eval_s']:.0f} s", flush=True)
    return time.time() - start


# ---- report ---------------------------------------------------------------------------------------
COLUMNS = (  # (header, key in training or eval, digits)
    ("train return", "train_return", 2),
    ("eval return", "eval_return", 2),
    ("fell", "fell", 2),
    ("v err m/s", "v_err", 3),
    ("E (equivariance)", "equivariance_error", 3),
    ("SI duty %", "si_duty", 2),
    ("SI ROM %", "si_rom", 2),
    ("pair SI duty %", "pair_si_duty", 2),
    ("pair SI ROM %", "pair_si_rom", 2),
    ("run s", "run_s", 0),
)


def values(result: dict) -> list[float | None]:
    """One run's numbers in `COLUMNS` order."""
    merged = {**(result.get("training") or {}), **(result.get("eval") or {}), "run_s": result.get("wall_s")}
    return [merged.get(key) for _, key, _ in COLUMNS]


def cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def mean_std(column: list[float | None], digits: int) -> str:
    present = [v for v in column if v is not None]
    if not present:
        return "-"
    text = f"{statistics.fmean(present):.{digits}f}"
    return text + (f" ± {statistics.stdev(present):.{digits}f}" if len(present) > 1 else "")


def table(results: list[dict]) -> str:
    """Rows per run and per setting (mean ± std over seeds)."""
    headers = ["setting", "seed", *(h for h, _, _ in COLUMNS)]
    digits = [d for _, _, d in COLUMNS]
    lines = []
    for setting in dict.fromkeys(r["setting"] for r in results):
        runs = [r for r in results if r["setting"] == setting]
        for r in runs:
            seed = f"{r['seed']}" + (" (failed)" if r.get("error") else "")
            lines.append(
                [SETTINGS[setting], seed, *(cell(v, d) for v, d in zip(values(r), digits, strict=True))]
            )
        columns = zip(*(values(r) for r in runs), strict=True)
        lines.append(
            [
                SETTINGS[setting],
                "mean ± std",
                *(mean_std(list(c), d) for c, d in zip(columns, digits, strict=True)),
            ]
        )
    return format_table(headers, lines)


def header(args: argparse.Namespace, common: list[str], results: list[dict]) -> str:
    """Machine, sizes and command above the table."""
    info = machine_info()
    trained = [r["training"] for r in results if r.get("training")]
    steps = sorted({t["env_steps"] for t in trained})
    iterations = sorted({t["iterations"] for t in trained})
    return "\n".join(
        [
            f"{TASK}: PPO vs PPO + symmetry, {', '.join(map(str, iterations))} iterations "
            f"({', '.join(f'{s:,}' for s in steps)} env steps), seeds {args.seeds}",
            f"machine: {info['cpu_model']} ({info['cpu_count']} CPUs, {info['memory_gib']} GiB)",
            f"evaluation: {len(COMMANDS)} commands x {args.eval_envs} envs, {args.eval_steps} steps "
            f"(first {args.warmup_steps} left out of the gait metrics), nominal physics, no noise",
            "overrides of both settings: " + " ".join(common),
            "sym: " + symmetry_override(args),
            "command: python bench/symmetry_go1.py " + shlex.join(sys.argv[1:]),
        ]
    )


def report(args: argparse.Namespace, common: list[str], results: list[dict], out: Path, extra: dict) -> str:
    """Write table.md and results.json (and `--json`); return the printed text."""
    text = header(args, common, results) + "\n\n" + table(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text + "\n")
    data = {"machine": machine_info(), "args": vars(args), "commands": COMMANDS, **extra, "results": results}
    write_json(out / "results.json", data)
    if args.json:
        write_json(args.json, data)
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if any(s not in SETTINGS for s in settings):
        print(f"unknown settings in {settings}; choose from {list(SETTINGS)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    common = common_overrides(args)
    start = time.time()
    results = []
    for seed in args.seeds:
        for setting in settings:
            if args.eval_only:
                log_dir = out / "runs" / f"{setting}_s{seed}"
                rows = read_rows(log_dir)
                results.append(
                    {
                        "setting": setting,
                        "seed": seed,
                        "run_dir": str(log_dir),
                        "training": training_summary(rows),
                    }
                )
                continue
            print(f"[{time.strftime('%H:%M:%S')}] train {setting} seed {seed}", flush=True)
            result = train_one(args, setting, seed, common, out)
            results.append(result)
            status = result["error"].splitlines()[0] if result.get("error") else "ok"
            print(f"    {status}: {result['wall_s']:.0f} s", flush=True)
    train_s = time.time() - start
    print(f"[{time.strftime('%H:%M:%S')}] evaluating", flush=True)
    eval_s = evaluate_runs(results, args)
    timing = {"train_s": train_s, "eval_s": eval_s, "wall_s": time.time() - start}
    text = report(args, common, results, out, timing)
    times = f"wall time: {timing['wall_s']:.0f} s (training {train_s:.0f} s, evaluation {eval_s:.0f} s)"
    print(f"\n{text}\n\n{times}")
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
