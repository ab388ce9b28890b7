#!/usr/bin/env bash
# "Every legged robot walks" on one GPU: one call of at most 10 minutes per robot. strl_jax's
# legged recipe for the robot (its CPU preset, or its task's preset under the body plan's recipe:
# bench/legged_zoo.py's ROBOTS) at the recipe's own sizes, beside Playground's own training path
# (brax PPO with the task's published settings) at Playground's published size (8192 envs),
# MINUTES of wall time each (compilation included), checkpoints every CKPT_MINUTES, every
# checkpoint evaluated on the device afterwards (64 envs, one 1000-step episode each) with
# bench/go1_walk.py's protocol (the standing robot's velrmsd first; the target is a third of it).
# What comes back is runs.json, summary.md, the PNG and the logs, not the checkpoints.
#
#   ROBOT=Spot bash bench/gpu_legged_zoo.sh [OUT_DIR]      # default /tmp/legged_zoo_gpu/<robot>
#   ROBOT=T1 MINUTES=3 bash bench/gpu_legged_zoo.sh
#   SMOKE=1 ROBOT=Barkour bash bench/gpu_legged_zoo.sh /tmp/x  # 32 envs: the pipeline on a CPU
#
# Robots: Go1, Spot, Barkour, Op3, BerkeleyHumanoid, T1, G1, Apollo. Needs a CUDA jax, strl_jax
# importable, brax 0.14.2, mujoco / mujoco-mjx and playground 0.2.0 with the robot models.
set -uo pipefail
cd "$(dirname "$0")/.."
ROBOT="${ROBOT:-Spot}"
OUT_DIR="${1:-/tmp/legged_zoo_gpu/$ROBOT}"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY="${PYTHON:-python3}"
if [ "${SMOKE:-0}" = 1 ]; then
  PEER_ENVS=32 MINUTES="${MINUTES:-1.5}" CKPT_MINUTES="${CKPT_MINUTES:-0.5}"
else
  PEER_ENVS=8192 MINUTES="${MINUTES:-3.25}" CKPT_MINUTES="${CKPT_MINUTES:-0.5}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

# the robot's preset and config files (one per line: the preset first)
mapfile -t CONFIG < <(cd bench && $PY - "$ROBOT" <<'PYEOF'
import sys

from legged_zoo import ROBOTS, robot_config

if sys.argv[1] not in ROBOTS:
    sys.exit(f"ROBOT={sys.argv[1]}: unknown; the robots: {', '.join(ROBOTS)}")
preset, files = robot_config(sys.argv[1])
print("\n".join([preset, *files]))
PYEOF
)
[ "${#CONFIG[@]}" -ge 1 ] || exit 2
ARGS=(--preset "${CONFIG[0]}" --peer-envs "$PEER_ENVS")
for f in "${CONFIG[@]:1}"; do ARGS+=(--config "$f"); done
if [ "${SMOKE:-0}" = 1 ]; then ARGS+=(--set env.num_envs=32); fi
echo "strl_jax: ${ARGS[*]}"

SPARE_S=240
if [ "${SMOKE:-0}" = 1 ]; then SPARE_S=1200; fi
LIMIT_S=$(awk "BEGIN {print int(2 * $MINUTES * 60 + $SPARE_S)}")
timeout "$LIMIT_S" $PY bench/go1_walk.py "${ARGS[@]}" \
  --seeds 1 --peer-seeds 1 --minutes "$MINUTES" --peer-minutes "$MINUTES" \
  --checkpoint-minutes "$CKPT_MINUTES" --peer-max-sps 5000000 --eval-envs 64 --out "$OUT_DIR"
echo "go1_walk.py exit $?"
if [ -n "${OUT:-}" ]; then  # the device tool's folder of files to bring back (at most 16 MiB each)
  tar czf "/tmp/legged_zoo_$ROBOT.tgz" --exclude checkpoints --exclude 'events.out.tfevents.*' \
    -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")"
  split -b 15M -d "/tmp/legged_zoo_$ROBOT.tgz" "$OUT/legged_zoo_$ROBOT.tgz."
  ls -la "$OUT"
fi
