"""One compiled env program, two jax versions: how much of a speed gap is the XLA version's.

brax's PPO runs on jax 0.7.2 (its venv, see vs_brax.py), strl_jax on the jax of its own venv, so
`vs_brax.py` compares two XLA compilers as well as two training loops. This script separates the
two: the brax interpreter exports brax's raw batched `env.step` (a jitted `lax.scan`, zero
actions, no auto-reset, no strl_jax code) as a serialized StableHLO program (`jax.export`); each
interpreter then compiles and runs that same program, and also traces and runs its own lowering of
the same scan. Equal programs at unequal speeds mean the gap lies in the XLA version.

    python bench/xla_versions.py --tasks hopper,ant --json /tmp/xla_versions.json

Both interpreters need `flatbuffers` (jax's serialization uses it; in the brax venv's pins).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from common import child_environment, format_table, machine_info, run_worker, write_json, xla_cpu_defaults
from vs_brax import BENCH_DEFAULTS, DEFAULT_BRAX_VENV, ensure_brax_venv

OPT_OUT = xla_cpu_defaults().OPT_OUT_VARIABLE
HEADERS = [
    "task",
    "backend",
    "num_envs",
    "program traced by",
    "run on jax",
    "XLA_FLAGS",
    "compile s",
    "env steps/s",
]


def raw_scan(task: str, backend: str, num_envs: int, length: int):
    """`(run, leaves)`: brax's batched step scanned `length` times over flat state leaves."""
    import jax
    import jax.numpy as jnp
    from brax import envs

    env = envs.get_environment(task, backend=backend)
    state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), num_envs))
    actions = jnp.zeros((num_envs, env.action_size))
    leaves, treedef = jax.tree.flatten(state)

    def run(*xs):
        def body(s, _):
            return jax.vmap(env.step)(s, actions), None

        final, _ = jax.lax.scan(body, jax.tree.unflatten(treedef, xs), None, length=length)
        return tuple(jax.tree.leaves(final))

    return run, leaves


def time_compiled(fn, leaves: list, repeats: int) -> tuple[float, float]:
    """(compile seconds, median seconds per call after one warm-up call)."""
    import jax

    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*leaves).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(*leaves))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*leaves))
        times.append(time.perf_counter() - start)
    return compile_s, sorted(times)[len(times) // 2]


def worker(spec: dict) -> dict[str, Any]:
    """Time this interpreter's own lowering; export it (`spec['export']`) or run an exported one."""
    import os

    import jax
    from jax import export

    flags = os.environ.get("XLA_FLAGS", "")
    run, leaves = raw_scan(spec["task"], spec["backend"], spec["num_envs"], spec["length"])
    steps = spec["num_envs"] * spec["length"]
    rows = []
    compile_s, call_s = time_compiled(run, leaves, spec["repeats"])
    rows.append(
        {
            "traced_by": jax.__version__,
            "run_on": jax.__version__,
            "xla_flags": flags,
            "compile_s": compile_s,
            "steps_per_s": steps / call_s,
        }
    )
    program = Path(spec["program"])
    if spec["export"]:
        program.write_bytes(export.export(jax.jit(run))(*leaves).serialize())
    else:
        exported = export.deserialize(bytearray(program.read_bytes()))
        compile_s, call_s = time_compiled(exported.call, leaves, spec["repeats"])
        rows.append(
            {
                "traced_by": spec["exported_by"],
                "run_on": jax.__version__,
                "xla_flags": flags,
                "compile_s": compile_s,
                "steps_per_s": steps / call_s,
            }
        )
    return {"jax": jax.__version__, "rows": rows}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="hopper,ant", help="comma-separated Brax tasks")
    p.add_argument("--num-envs", type=int, default=2048)
    p.add_argument("--length", type=int, default=80, help="env steps per call (scan length)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per program (median)")
    p.add_argument("--brax-venv", default=DEFAULT_BRAX_VENV, help="vs_brax.py brax venv (made if missing)")
    p.add_argument("--brax-python", default=None, help="use this interpreter instead of the brax venv")
    p.add_argument("--work-dir", default=None, help="programs and logs (default: a new /tmp folder)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("worker_args", nargs="*", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        xla_cpu_defaults().apply_cpu_defaults()  # unless the parent set STRL_JAX_XLA_CPU_DEFAULTS=0
        write_json(args.worker_args[1], worker(json.loads(Path(args.worker_args[0]).read_text())))
        return 0
    brax_python = args.brax_python or str(ensure_brax_venv(Path(args.brax_venv)))
    work_dir = Path(args.work_dir or f"/tmp/strl_bench_runs/xla_versions-{time.strftime('%Y%m%d-%H%M%S')}")
    me = [str(Path(__file__).resolve()), "--worker"]
    table, results, failed = [], [], False
    for task in [t for t in args.tasks.split(",") if t]:
        backend = BENCH_DEFAULTS.get(task, {}).get("backend", "positional")
        spec = {
            "task": task,
            "backend": backend,
            "num_envs": args.num_envs,
            "length": args.length,
            "repeats": args.repeats,
            "program": str(work_dir / f"{task}.jax_export"),
        }
        print(f"[{time.strftime('%H:%M:%S')}] {task}: exporting and timing with {brax_python}", flush=True)
        first = run_worker(
            [brax_python, *me],
            {**spec, "export": True},
            work_dir,
            f"{task}-export",
            None,
            env=child_environment(),
        )
        if "error" in first:
            print(first["error"], flush=True)
            failed = True
            continue
        runs = [first]
        for label, opt_out in (("xla", "0"), ("strl", None)):
            env = child_environment()
            if opt_out is not None:
                env[OPT_OUT] = opt_out
            print(
                f"[{time.strftime('%H:%M:%S')}] {task}: timing with {sys.executable} "
                f"({'XLA defaults' if opt_out else 'strl_jax defaults'})",
                flush=True,
            )
            result = run_worker(
                [sys.executable, *me],
                {**spec, "export": False, "exported_by": first["jax"]},
                work_dir,
                f"{task}-run-{label}",
                None,
                env=env,
            )
            if "error" in result:
                print(result["error"], flush=True)
                failed = True
            runs.append(result)
        for result in runs:
            for row in result.get("rows", []):
                table.append(
                    [
                        task,
                        backend,
                        args.num_envs,
                        row["traced_by"],
                        row["run_on"],
                        row["xla_flags"] or "-",
                        row["compile_s"],
                        row["steps_per_s"],
                    ]
                )
        results.append({"task": task, "runs": runs})
    print(format_table(HEADERS, table))
    if args.json:
        write_json(args.json, {"machine": machine_info(), "args": vars(args), "results": results})
        print(f"written to {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
