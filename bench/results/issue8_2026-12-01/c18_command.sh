#!/usr/bin/env bash
# Call c18 (2026-12-01, third session): the output arena (sandbox.handoff) on the H200, then the
# optimisation loop's paired rounds with the time left.
#  1. bench/handoff_cost.py: a 4 GiB output through the arena, registered with CUDA and pageable;
#  2. bench/eval_gpu_smoke.py, quick: rms_norm's example (8 shapes) and the exploits whose outputs
#     cross the hand-over, the new shrink_output_arena among them;
#  3. eager block_scaled_mm on its 12 shapes with >= 0.2 GB of output, as c6 ran them through raw
#     files (2026-11-30): bench/transfer_cost.py compares the two;
#  4. bench/opt_loop_gpu.py until TOTAL_S.
#   c18_command.sh DEST TOTAL_S   -> DEST/c18.tar.gz
set -u
DEST=${1:?usage: c18_command.sh DEST TOTAL_S}
TOTAL=${2:?}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30
END=$(($(date +%s) + TOTAL))
W=$DEST/c18
mkdir -p "$W"
step() {  # step NAME LIMIT_S COMMAND…
  local name=$1 limit=$2
  shift 2
  ((limit > 20)) || { echo "$name skipped at $(date -u +%T)" >>"$W/steps.txt"; return; }
  CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 "$limit" "$@" >"$W/$name.log" 2>&1
  echo "$name exit $? at $(date -u +%T)" >>"$W/steps.txt"
}
left() { echo $((END - $(date +%s) - 20)); }
step handoff_cost 90 python3 bench/handoff_cost.py --out "$W/handoff_cost_h200.json"
step smoke 170 python3 bench/eval_gpu_smoke.py --out "$W/smoke" --budget-s 150 --quick --examples rms_norm --no-baselines \
  --exploits warmup_then_cheat,side_stream,output_cache_by_pointer,lazy_output,wrong_dtype,shrink_output_arena,fake_results
step eager_bsmm 160 python3 bench/baselines.py run --baseline eager --no-profile --ops block_scaled_mm \
  --shapes 5,6,7,8,9,10,16,17,18,19,20,21 --calibrate $R/eager_combined --budget-s 140 --out "$W/eager_bsmm"
step opt_loop "$(left)" python3 bench/opt_loop_gpu.py --deadline-s $(($(left) - 45)) --out-dir "$W/opt_loop"
tar czf "$DEST/c18.tar.gz" -C "$DEST" c18 && rm -rf "$W"
