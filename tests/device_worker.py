"""Subprocess body of tests/test_devices.py: one training run on forced host-platform devices.

`XLA_FLAGS=--xla_force_host_platform_device_count=N` must be set by the caller, before jax is
imported. Prints one JSON line per run: whether every device holds the same params, and a digest.
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
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.coordinator:
        from strl_jax.train_loops.devices import initialize_distributed

        initialize_distributed(args.coordinator, args.num_processes, args.process_id)

    from strl_jax.configs.loader import resolve_config
    from strl_jax.train_loops.runner import train

    if args.resume:
        cfg = resolve_config(None, [f"{args.log_dir}/config.yaml"], args.overrides)
    else:
        cfg = resolve_config("inverted_pendulum", overrides=args.overrides)
    counts = [int(c) for c in args.device_counts.split(",")] if args.device_counts else [None]
    for count in counts:
        log_dir = args.log_dir if count is None else f"{args.log_dir}/devices_{count}"
        run_cfg = (
            cfg
            if count is None
            else dataclasses.replace(cfg, runner=dataclasses.replace(cfg.runner, num_devices=count))
        )
        result = train(run_cfg, log_dir, verbose=False, resume=args.resume, handle_signals=False)
        ts = result.train_state
        out = {
            "process": jax.process_index(),
            "devices": jax.device_count(),
            "mesh_devices": len(jax.tree.leaves(ts.params)[0].sharding.device_set),
            "replicas_identical": replicas_identical(
                (ts.params, ts.opt_state, ts.normalizers, ts.learning_rate)
            ),
            "params": digest(ts.params),
            "iteration": int(np.max(np.asarray(ts.iteration.addressable_data(0)))),  # a population: [K]
        }
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
