"""strl_jax training steps/s and memory against the number of environments (and of devices).

Each configuration trains the task's preset (configs/<task>.yaml) with
`runner.train` for a few iterations, without evaluation, in its own subprocess, so that the peak
RSS is that configuration's. Steady-state steps/s leaves out the first iteration, which carries
the compilation. With `--raw-json` (the output of env_throughput.py) the table also shows the
training steps/s as a fraction of the raw env throughput at the same num_envs.

When more than one device is visible, the same is repeated with 1, 2, 4, ... of them
(CUDA_VISIBLE_DEVICES on GPUs, --xla_force_host_platform_device_count with --cpu-devices).

    python bench/scaling.py --task inverted_pendulum --raw-json /tmp/env_throughput.json \
        --json /tmp/scaling.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from common import (
    BENCH_DIR,
    child_environment,
    fmt,
    format_table,
    machine_info,
    ratio,
    run_worker,
    write_json,
)

import strl_jax  # noqa: F401  (its XLA:CPU defaults, before jax starts a backend)

DEFAULT_NUM_ENVS = "256,512,1024,2048,4096,8192,16384"


def device_counts(available: int) -> list[int]:
    """1, 2, 4, ... up to the devices present (and the total itself)."""
    counts, n = [], 1
    while n < available:
        counts.append(n)
        n *= 2
    return counts + [available]


def device_environment(backend: str, count: int, cpu_devices: int | None) -> dict[str, str]:
    env = child_environment()
    if backend == "gpu":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(count))
    elif cpu_devices:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={count}"])
    return env


def raw_throughput(path: str | None) -> dict[tuple[str, str, int], float]:
    """(task, backend, num_envs) -> env steps/s from an env_throughput.py JSON file."""
    if not path:
        return {}
    data = json.loads(Path(path).read_text())
    return {
        (r["task"], r["backend"], r["num_envs"]): r["steps_per_s"]
        for r in data["results"]
        if "steps_per_s" in r
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="inverted_pendulum", help="task whose preset is trained")
    p.add_argument("--num-envs", default=DEFAULT_NUM_ENVS, help="comma-separated env counts")
    p.add_argument("--iterations", type=int, default=6, help="iterations per run (the first is compilation)")
    p.add_argument("--time-limit", type=float, default=None, help="seconds per run (checked every iteration)")
    p.add_argument(
        "--devices",
        default=None,
        help="comma-separated device counts (default: 1, 2, 4, ... when several are present)",
    )
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="split the CPU into this many XLA host devices for the device axis",
    )
    p.add_argument(
        "--device-num-envs",
        default=None,
        help="env counts for the device axis (default: the largest of --num-envs)",
    )
    p.add_argument(
        "--strl-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra strl_jax override, e.g. env.backend=spring",
    )
    p.add_argument("--raw-json", default=None, help="env_throughput.py JSON for the training/raw column")
    p.add_argument("--work-dir", default=None, help="logs and run folders (default: a new /tmp folder)")
    p.add_argument("--json", default=None, help="also write all results to this JSON file")
    return p.parse_args(argv)


def run_config(
    args: argparse.Namespace, work_dir: Path, task: str, num_envs: int, devices: int | None, env: dict
) -> dict[str, Any]:
    label = f"{task}-n{num_envs}" + (f"-d{devices}" if devices else "")
    overrides = [
        f"env.num_envs={num_envs}",
        f"runner.max_iterations={args.iterations}",
        "runner.eval_interval=0",
        "runner.log_interval=1",
        "runner.compile_cache=false",
        "runner.save_interval=0",
        *args.strl_set,
    ]
    spec = {
        "task": task,
        "overrides": overrides,
        "log_dir": str(work_dir / label),
        "time_limit_s": args.time_limit,
        "target": None,
    }
    timeout = None if args.time_limit is None else args.time_limit + 1800
    print(f"[{time.strftime('%H:%M:%S')}] {label} ...", flush=True)
    r = run_worker(
        [sys.executable, str(BENCH_DIR / "common.py"), "strl-worker"], spec, work_dir, label, timeout, env=env
    )
    r.update(num_envs=num_envs, devices_requested=devices)
    if "error" in r:
        print(r["error"], flush=True)
    else:
        print(
            f"  {fmt(r.get('sps'))} steps/s, compile {fmt(r.get('compile_s'))} s, "
            f"peak RSS {fmt(r['peak_rss_mib'])} MiB, {r['iterations']} iterations, {r['wall_s']:.0f} s",
            flush=True,
        )
    return r


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import jax

    from strl_jax.configs.loader import resolve_config

    cfg = resolve_config(args.task, overrides=list(args.strl_set))
    backend, available = jax.default_backend(), jax.device_count()
    if args.cpu_devices and backend == "cpu":
        available = args.cpu_devices
    work_dir = Path(args.work_dir or f"/tmp/strl_bench_runs/scaling-{time.strftime('%Y%m%d-%H%M%S')}")
    info = {
        "machine": machine_info(),
        "jax": jax.__version__,
        "backend": backend,
        "devices": available,
        "device_kind": jax.devices()[0].device_kind,
        "work_dir": str(work_dir),
    }
    print(
        f"machine: {info['machine']['cpu_model']}, {info['machine']['cpu_count']} CPUs; "
        f"jax {jax.__version__} on {backend} ({info['device_kind']}), {available} device(s); "
        f"preset {args.task} ({cfg.env.backend}, {cfg.runner.num_steps_per_env} steps/env/iteration); "
        f"logs in {work_dir}"
    )
    raw = raw_throughput(args.raw_json)
    num_envs_list = [int(n) for n in args.num_envs.split(",") if n]

    results = [run_config(args, work_dir, args.task, n, None, child_environment()) for n in num_envs_list]

    device_results: list[dict] = []
    counts = [int(c) for c in args.devices.split(",")] if args.devices else device_counts(available)
    if available > 1 or args.devices:
        dev_envs = [int(n) for n in (args.device_num_envs or str(max(num_envs_list))).split(",")]
        for count in counts:
            env = device_environment(backend, count, args.cpu_devices)
            for n in dev_envs:
                device_results.append(run_config(args, work_dir, args.task, n, count, env))
    else:
        print("one device present: no device axis")

    headers = [
        "num_envs",
        "steps/iter",
        "compile s",
        "iteration s",
        "train steps/s",
        "raw env steps/s",
        "train/raw",
        "peak RSS MiB",
        "device peak MiB",
    ]
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["num_envs"], "failed"] + [None] * (len(headers) - 2))
            continue
        raw_sps = raw.get((args.task, cfg.env.backend, r["num_envs"]))
        sps = r.get("sps")
        rows.append(
            [
                r["num_envs"],
                r["steps_per_iteration"],
                r.get("compile_s"),
                r["steps_per_iteration"] / sps if sps else None,
                sps,
                raw_sps,
                ratio(sps, raw_sps),
                r["peak_rss_mib"],
                r["device"].get("device_peak_mib"),
            ]
        )
    print(f"\n{args.task} preset, {args.iterations} iterations per run (steps/s over all but the first)")
    print(format_table(headers, rows))
    preset_n = resolve_config(args.task).env.num_envs
    at_preset = [r for r in results if r["num_envs"] == preset_n and "error" not in r]
    if at_preset:
        frac = ratio(at_preset[0].get("sps"), raw.get((args.task, cfg.env.backend, preset_n)))
        if frac is None:
            print(f"\ntrain/raw at the preset's num_envs ({preset_n}): not measured (pass --raw-json)")
        else:
            print(
                f"\ntrain/raw at the preset's num_envs ({preset_n}): {frac:.2f} "
                f"(goal >= 0.4: {'met' if frac >= 0.4 else 'missed'})"
            )

    if device_results:
        dev_headers = [
            "devices requested",
            "devices seen",
            "num_envs",
            "compile s",
            "train steps/s",
            "peak RSS MiB",
            "device peak MiB",
        ]
        dev_rows = [
            [
                r["devices_requested"],
                r.get("device", {}).get("device_count"),
                r["num_envs"],
                r.get("compile_s"),
                r.get("sps"),
                r.get("peak_rss_mib"),
                r.get("device", {}).get("device_peak_mib"),
            ]
            for r in device_results
        ]
        print("\nAgainst devices (strl_jax places its iteration on the default device; no sharding yet)")
        print(format_table(dev_headers, dev_rows))
    if args.json:
        data = {**info, "args": vars(args), "results": results, "device_results": device_results}
        write_json(args.json, data)
        print(f"\nwritten to {args.json}")
    return 0 if all("error" not in r for r in results + device_results) else 1


if __name__ == "__main__":
    sys.exit(main())
