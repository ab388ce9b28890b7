#!/usr/bin/env bash
# st_rl's rough-terrain pipeline (bench/go1_terrain.py) on one GPU at Playground's size, in one call
# of at most 10 minutes: the height-scan teacher for TEACHER_MINUTES, the blind policy for
# TEACHER_MINUTES + STUDENT_MINUTES and the students (STAGES) for STUDENT_MINUTES, each at 8192
# envs x 20 steps in 32 minibatches (Playground's published Go1JoystickRoughTerrain size; the
# recipe's other learner settings), wall time counting compilation, checkpoints every CKPT_MINUTES,
# every checkpoint evaluated on the device afterwards (64 envs, one 1000-step episode each).
# The teacher and blind policy fine-tune the GPU's flat-terrain Go1 (examples/go1_walk_gpu, 3.3
# minutes of an H200 from a cold start, counted on the pipeline's clock) as the CPU run fine-tunes
# the CPU's (recipes/finetune_go1_walk).
# What comes back is terrain.md, terrain.png, each stage's runs.json and summary, not checkpoints.
#
#   bash bench/gpu_go1_terrain.sh [OUT_DIR]                    # default /tmp/go1_terrain_gpu
#   STAGES="teacher student_tppo" TEACHER_MINUTES=4 bash bench/gpu_go1_terrain.sh
#   SMOKE=1 bash bench/gpu_go1_terrain.sh /tmp/x               # tiny sizes: the pipeline on a CPU
#
# Needs a CUDA jax, strl_jax importable, mujoco / mujoco-mjx and playground 0.2.0.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-/tmp/go1_terrain_gpu}"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY="${PYTHON:-python3}"
STAGES="${STAGES:-teacher blind student_tppo}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
if [ "${SMOKE:-0}" = 1 ]; then
  ARGS=(--smoke)
  LIMIT_S=2400
else
  TEACHER_MINUTES="${TEACHER_MINUTES:-2.5}" STUDENT_MINUTES="${STUDENT_MINUTES:-1.5}"
  ARGS=(--teacher-minutes "$TEACHER_MINUTES" --student-minutes "$STUDENT_MINUTES"
    --checkpoint-minutes "${CKPT_MINUTES:-0.5}" --eval-envs 64
    --set env.num_envs=8192 --set runner.num_steps_per_env=20 --set algorithm.num_mini_batches=32
    --set runner.load=examples/go1_walk_gpu --start-minutes 3.3)
  LIMIT_S=570
fi
# shellcheck disable=SC2086
timeout "$LIMIT_S" $PY bench/go1_terrain.py "${ARGS[@]}" --seeds 1 --stages $STAGES --out "$OUT_DIR"
echo "go1_terrain.py exit $?"
$PY bench/go1_terrain.py summary --out "$OUT_DIR" >/dev/null 2>&1 || true
if [ -n "${OUT:-}" ]; then  # the device tool's folder of files to bring back (at most 16 MiB each)
  tar czf /tmp/go1_terrain_gpu.tgz --exclude checkpoints --exclude 'events.out.tfevents.*' \
    -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")"
  split -b 15M -d /tmp/go1_terrain_gpu.tgz "$OUT/go1_terrain_gpu.tgz."
  ls -la "$OUT"
fi
