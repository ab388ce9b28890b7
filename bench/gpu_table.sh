#!/usr/bin/env bash
# The GPU table of BENCHMARKS.md ("Learning at GPU scale") in one call of at most 10 minutes on one
# H100/H200: training throughput against the raw env throughput at >= 8192 envs, then learning
# curves of strl_jax's GPU presets against brax's PPO with brax's published settings (same env,
# same budget, one seed), task by task while time is left.
#
#   bash bench/gpu_table.sh [OUT_DIR]          # default /tmp/gpu_table; DEADLINE_S (default 540)
#   PARTS=curves TASKS="halfcheetah humanoid" bash bench/gpu_table.sh   # what an earlier call missed
#
# Needs a CUDA jax in the interpreter that runs it (brax runs in the same interpreter:
# `--brax-python`), strl_jax importable (`pip install -e .` or PYTHONPATH=.), brax 0.14.2 and
# mujoco / mujoco-mjx. Every part writes its JSON as it goes, so a call cut short keeps what
# finished; learning_curves.py stops a run at its first evaluation after its time limit.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-${OUT:-/tmp/gpu_table}}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY="${PYTHON:-python3}"
START=$(date +%s)
DEADLINE_S="${DEADLINE_S:-540}"
left() { echo $((DEADLINE_S - ($(date +%s) - START))); }
log() { echo "[gpu_table +$(($(date +%s) - START))s] $*"; }

# SMOKE=1: the same parts at toy sizes, to check the script on a CPU before a GPU call
if [ "${SMOKE:-0}" = 1 ]; then
  ENVS_A=64,128 ENVS_B=64 CURVE_ARGS=(--num-timesteps 100000 --evals 2 --num-eval-envs 8 --set env.num_envs=64)
else
  ENVS_A=8192,16384 ENVS_B=8192 CURVE_ARGS=()
fi

PARTS="${PARTS:-throughput curves}"
TASKS="${TASKS:-ant halfcheetah humanoid}"

log "devices: $($PY -c 'import jax; print(jax.devices())' 2>&1 | tail -1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

# 1. training steps/s against raw env steps/s at 8192 and 16384 envs (inverted_pendulum preset, the
#    basis of the 54-59% measured before) and ant's GPU preset at 8192
if [[ " $PARTS " == *" throughput "* ]]; then
  log "throughput"
  timeout 150 $PY bench/env_throughput.py --tasks inverted_pendulum --num-envs $ENVS_A --min-time 2 \
    --json "$OUT/env_ip.json" || log "env_throughput inverted_pendulum failed ($?)"
  timeout 120 $PY bench/scaling.py --task inverted_pendulum --num-envs $ENVS_A --iterations 6 \
    --raw-json "$OUT/env_ip.json" --json "$OUT/scaling_ip.json" || log "scaling inverted_pendulum failed ($?)"
  timeout 60 $PY bench/env_throughput.py --tasks ant --num-envs $ENVS_B --min-time 2 \
    --json "$OUT/env_ant.json" || log "env_throughput ant failed ($?)"
  timeout 90 $PY bench/scaling.py --task ant_gpu --num-envs $ENVS_B --iterations 4 \
    --raw-json "$OUT/env_ant.json" --json "$OUT/scaling_ant.json" || log "scaling ant failed ($?)"
fi

# 2. learning curves at brax's published budgets, one task per invocation (each keeps its files)
[[ " $PARTS " == *" curves "* ]] || TASKS=""
for task in $TASKS; do
  remaining=$(left)
  if [ "$remaining" -lt 150 ]; then
    log "skipping $task: ${remaining}s left"
    continue
  fi
  # two runs (brax, strl_jax) share what is left of this task's slot
  per_run=$(( (remaining - 40) / 2 ))
  [ "$task" != humanoid ] && [ "$per_run" -gt 170 ] && per_run=170
  log "learning curves: $task (time limit ${per_run}s per run)"
  timeout $((remaining - 5)) $PY bench/learning_curves.py --tasks "$task" --seeds 1 \
    --brax-python "$(command -v $PY)" --time-limit "$per_run" --out "$OUT/curves_$task" "${CURVE_ARGS[@]}" \
    || log "learning_curves $task ended with $?"
done
log "done"
