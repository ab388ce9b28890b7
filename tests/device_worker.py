"""Subprocess body of tests/test_devices.py: training runs on forced host-platform devices.

`XLA_FLAGS=--xla_force_host_platform_device_count=N` must be set by the caller, before jax is
imported. Either one config (`overrides`, one run per `--device_counts` entry), or `--plan`: a JSON
list of `{"name", "overrides", "device_counts"}`, all runs in this one process (one jax start, and
the env programs the runs share compiled once). Prints one JSON line per run: its name and device
count, whether every device holds the same params, and a digest.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys

import jax
import numpy as np


def digest(tree) -> str:
    """Hash of the bytes of every leaf (this process's first copy)."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        h.update(np.asarray(leaf.addressable_data(0)).tobytes())
    return h.hexdigest()


def replicas_identical(tree) -> bool:
    """Every addressable copy of every replicated leaf is bitwise the same."""
    for leaf in jax.tree.leaves(tree):
        copies = [np.asarray(s.data) for s in leaf.addressable_shards]
        if any(not np.array_equal(copies[0], c) for c in copies[1:]):
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log_dir", required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--coordinator")
    parser.add_argument("--num_processes", type=int)
    parser.add_argument("--process_id", type=int)
    parser.add_argument("--device_counts", help="comma-separated runner.num_devices, one run each")
    parser.add_argument("--plan", help="JSON list of {name, overrides, device_counts}: several configs")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.coordinator:
        from strl_jax.runners.devices import initialize_distributed

        initialize_distributed(args.coordinator, args.num_processes, args.process_id)

    from strl_jax.configs.loader import resolve_config

    if args.plan:
        plan = json.loads(args.plan)
    else:
        counts = [int(c) for c in args.device_counts.split(",")] if args.device_counts else [None]
        plan = [{"name": "", "overrides": args.overrides, "device_counts": counts}]
    for entry in plan:
        if args.resume:
            cfg = resolve_config(None, [f"{args.log_dir}/config.yaml"], entry["overrides"])
        else:
            cfg = resolve_config("inverted_pendulum", overrides=entry["overrides"])
        for count in entry["device_counts"]:
            folder = f"{args.log_dir}/{entry['name']}" if entry["name"] else args.log_dir
            run(cfg, folder, count, entry["name"], args.resume)
    return 0


def run(cfg, folder: str, count: int | None, name: str, resume: bool) -> None:
    """One training run of `cfg` on `count` devices (all when None); prints its JSON line."""
    from strl_jax.runners.runner import train

    log_dir = folder if count is None else f"{folder}/devices_{count}"
    if count is not None:
        cfg = dataclasses.replace(cfg, runner=dataclasses.replace(cfg.runner, num_devices=count))
    ts = train(cfg, log_dir, verbose=False, resume=resume, handle_signals=False).train_state
    out = {
        "name": name,
        "count": count,
        "process": jax.process_index(),
        "devices": jax.device_count(),
        "mesh_devices": len(jax.tree.leaves(ts.params)[0].sharding.device_set),
        "replicas_identical": replicas_identical((ts.params, ts.opt_state, ts.normalizers, ts.learning_rate)),
        "params": digest(ts.params),
        "iteration": int(np.max(np.asarray(ts.iteration.addressable_data(0)))),  # a population: [K]
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
