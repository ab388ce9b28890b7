#!/usr/bin/env bash
# The GPU measurements of the Playground section of BENCHMARKS.md, each part within one 10-minute
# call on an H100 (`bash bench/gpu_playground.sh throughput` or `... table`).
#
# Needs a CUDA jax in the interpreter, strl_jax, `playground==0.2.0` and the Go1/G1 robot models.
# The model wheels are too big to carry to a machine without package access; copy the robot
# folders instead (`unitree_go1`, `unitree_g1` from ~/.cache/strl_jax/mujoco_menagerie, a few MB)
# and point STRL_JAX_MENAGERIE at them.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_playground}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
case "${1:-table}" in
  throughput)
    # raw env steps/s of Go1 flat/rough and G1 at GPU sizes (fresh random resets and domain
    # randomisation included), about 1 minute of compilation per row
    python bench/env_throughput.py --tasks Go1JoystickFlatTerrain,Go1JoystickRoughTerrain,G1JoystickFlatTerrain \
      --num-envs 4096,8192 --min-time 5 --json "$OUT/playground_throughput.json"
    ;;
  table)
    # Playground's brax PPO (published Go1 settings, 8192 envs) against strl_jax's preset and the
    # matched settings: 10M steps each, 5 evaluations, every run stopped at 150 s at the latest
    python bench/vs_playground.py --full --tasks Go1JoystickFlatTerrain --steps 10000000 --evals 5 \
      --time-limit 150 --json "$OUT/vs_playground_gpu.json" --png-dir "$OUT"
    ;;
  *)
    echo "usage: bash bench/gpu_playground.sh throughput|table" >&2
    exit 2
    ;;
esac
