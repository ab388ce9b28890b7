#!/usr/bin/env bash
# "Go1 walks" on one GPU, in one call of at most 10 minutes: strl_jax against Playground's own
# training path (brax PPO with the published Go1 settings), both at Playground's published size
# (8192 envs x 20 steps, 32 minibatches, 4 epochs), MINUTES of wall time each (compilation
# included), checkpoints every CKPT_MINUTES. strl_jax runs the Playground preset with brax's
# implementation choices (bench/brax_mapping.py `matched`, plus brax's tanh-squashed Gaussian), so
# that the two runs differ in implementation, not in algorithm.
#
# Every checkpoint is evaluated on the device after its run (64 envs, one 1000-step episode
# each); what comes back is runs.json, summary.md, the PNG and the logs, not the checkpoints: at
# 8192 envs each one holds the rollout state of every env (about 170 MB). NO_EVAL=1 trains only
# and brings the checkpoints back (`python bench/go1_walk.py --eval-only --out OUT_DIR` then
# evaluates them on any machine; give the call fewer MINUTES so that fewer checkpoints are kept).
#
# RECIPE=preset runs instead strl_jax's CPU preset `Go1JoystickFlatTerrain_cpu` at its own sizes
# (512 envs x 24 steps, 4 minibatches x 4 epochs, the recipe configs/recipes/legged_cpu.yaml)
# against the peer at Playground's published size (8192 envs): the summary gives each run's time
# to velrmsd <= 0.35 and to the peer's final evaluation return.
#
#   bash bench/gpu_go1_walk.sh [OUT_DIR]        # default /tmp/go1_walk_gpu
#   RECIPE=preset bash bench/gpu_go1_walk.sh /tmp/go1_preset_gpu
#   SMOKE=1 bash bench/gpu_go1_walk.sh /tmp/x   # 32 envs, a minute each: the pipeline on a CPU
#
# Needs a CUDA jax, strl_jax importable, brax 0.14.2, mujoco / mujoco-mjx, playground 0.2.0 and
# the Go1 model (STRL_JAX_MENAGERIE pointing at a folder holding `unitree_go1`).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-/tmp/go1_walk_gpu}"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY="${PYTHON:-python3}"
if [ "${SMOKE:-0}" = 1 ]; then
  NUM_ENVS=32 MINUTES="${MINUTES:-1.5}" CKPT_MINUTES="${CKPT_MINUTES:-0.5}"
else
  NUM_ENVS=8192 MINUTES="${MINUTES:-3.25}" CKPT_MINUTES="${CKPT_MINUTES:-0.5}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

# Playground's published settings at NUM_ENVS, as strl_jax overrides (one per line)
mapfile -t SETS < <(cd bench && $PY - "$NUM_ENVS" <<'EOF'
import sys

from brax_mapping import brax_choices, dotted_overrides, matched
from playground_settings import bench_settings, published_settings
from strl_jax.configs.loader import deep_merge

kw, _ = bench_settings(published_settings("Go1JoystickFlatTerrain"), int(sys.argv[1]), None, None, 1, True, {})
print("\n".join(dotted_overrides(deep_merge(matched(kw), brax_choices(kw, ["tanh_distribution"])))))
EOF
)
[ "${#SETS[@]}" -gt 5 ] || { echo "could not map Playground's settings" >&2; exit 1; }
case "${RECIPE:-published}" in
  published)
    ARGS=(--preset Go1JoystickFlatTerrain)
    for s in "${SETS[@]}"; do ARGS+=(--set "$s"); done ;;
  preset)  # the CPU preset as it is; only a smoke run shrinks it
    ARGS=(--preset Go1JoystickFlatTerrain_cpu --peer-envs "$NUM_ENVS")
    if [ "${SMOKE:-0}" = 1 ]; then ARGS+=(--set env.num_envs=32); fi ;;
  *) echo "RECIPE=${RECIPE}: unknown; the choices: published, preset" >&2; exit 2 ;;
esac
echo "strl_jax: ${ARGS[*]}"

EVAL=(--eval-envs 64)
EXCLUDE=(--exclude checkpoints --exclude 'events.out.tfevents.*')
if [ "${NO_EVAL:-0}" = 1 ]; then EVAL=(--no-eval); EXCLUDE=(--exclude 'events.out.tfevents.*'); fi
# each run's evaluation (two compilations and a few seconds per checkpoint) gets a minute on the
# GPU; a smoke run on a 2-core CPU compiles for minutes more
SPARE_S=180
if [ "${SMOKE:-0}" = 1 ]; then SPARE_S=900; fi
LIMIT_S=$(awk "BEGIN {print int(2 * $MINUTES * 60 + $SPARE_S)}")
timeout "$LIMIT_S" $PY bench/go1_walk.py "${ARGS[@]}" \
  --seeds 1 --peer-seeds 1 --minutes "$MINUTES" --peer-minutes "$MINUTES" \
  --checkpoint-minutes "$CKPT_MINUTES" --peer-max-sps 5000000 "${EVAL[@]}" --out "$OUT_DIR"
echo "go1_walk.py exit $?"
if [ -n "${OUT:-}" ]; then  # the device tool's folder of files to bring back (at most 16 MiB each)
  tar czf /tmp/go1_walk_gpu.tgz "${EXCLUDE[@]}" -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")"
  split -b 15M -d /tmp/go1_walk_gpu.tgz "$OUT/go1_walk_gpu.tgz."
  ls -la "$OUT"
fi
