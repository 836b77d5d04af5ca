#!/usr/bin/env bash
# Call c19 (2026-12-01, third session), the session's last: the final code of the output arena
# (after the review's ArenaMapping and the keep request) on the H200, in the 266 s left:
# handoff_cost, the GPU exploit smoke on the exploits whose timed outputs are fetched, and eager
# block_scaled_mm's two largest outputs (c6 and c18 ran them too).
#   c19_command.sh DEST   -> DEST/c19.tar.gz
set -u
DEST=${1:?usage: c19_command.sh DEST}
cd "$(dirname "$0")/../../.." || exit 2
W=$DEST/c19
mkdir -p "$W"
step() {  # step NAME LIMIT_S COMMAND…
  local name=$1 limit=$2
  shift 2
  CUDA_VISIBLE_DEVICES=0 timeout --kill-after=5 "$limit" "$@" >"$W/$name.log" 2>&1
  echo "$name exit $? at $(date -u +%T)" >>"$W/steps.txt"
}
step handoff_cost 40 python3 bench/handoff_cost.py --out "$W/handoff_cost_h200.json" --gib 2
step smoke 75 python3 bench/eval_gpu_smoke.py --out "$W/smoke" --budget-s 65 --quick --examples rms_norm --no-baselines \
  --exploits warmup_then_cheat,output_cache_by_pointer,shrink_output_arena
step eager_bsmm 60 python3 bench/baselines.py run --baseline eager --no-profile --ops block_scaled_mm --shapes 10,21 \
  --budget-s 50 --out "$W/eager_bsmm"
tar czf "$DEST/c19.tar.gz" -C "$DEST" c19 && rm -rf "$W"
