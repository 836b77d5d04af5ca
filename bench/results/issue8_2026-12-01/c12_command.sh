#!/usr/bin/env bash
# Call c12 (2026-12-01), the session's last: two lanes, one GPU each (one after the other on a
# one-GPU machine, each with half the time).
#  A: where the scratch files should live (bench/scratch_transfer.py: /tmp vs /dev/shm); torch.compile
#     on the unjudged shapes of attention_forward, fused_moe and mla_decode_attention, then
#     gated_delta_rule_update's short shapes (T <= 258).
#  B: torch.compile on unified_attention 16 (18 sequences, the smallest multi-sequence shape), then a
#     spread of chunk_gated_delta_rule_state's unjudged shapes.
#   c12_command.sh DEST TOTAL_S   -> DEST/c12.tar.gz
set -u
DEST=${1:?usage: c12_command.sh DEST TOTAL_S}
TOTAL=${2:?}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30 D=bench/results/issue8_2026-12-01
C10=$D/runs/c10 C11=$D/runs/c11
CAL="$R/eager_combined $R/compile_combined $D/runs/c7 $D/runs/c8_loop_free $D/runs/c9_loop_free $D/runs/c9_loops $C10/ua_single $C10/paged_short $C10/rest $C11/compile_rest"
JUDGED="$D/compile_combined $C10/ua_single $C10/paged_short $C10/rest $C11/compile_rest"
END=$(($(date +%s) + TOTAL))
W=$DEST/c12
mkdir -p "$W"
GPUS=$(nvidia-smi -L | wc -l)
left() { echo $((END - $(date +%s) - ${1:-0})); }
min() { echo $(($1 < $2 ? $1 : $2)); }
run() {  # run NAME GPU BUDGET_S ARGS…  (torch.compile through baselines.py run, one GPU)
  local name=$1 gpu=$2 budget=$3
  shift 3
  ((budget > 30)) || { echo "$name skipped at $(date -u +%T)" >>"$W/steps.txt"; return; }
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=$gpu timeout --kill-after=10 $((budget + 40)) python3 bench/baselines.py run --calibrate $CAL \
    --baseline torch-compile --no-profile --skip-judged $JUDGED "$@" --budget-s "$budget" --out "$W/$name" >"$W/$name.log" 2>&1
  echo "$name exit $? at $(date -u +%T)" >>"$W/steps.txt"
}
lane_a() {  # lane_a GPU END_OF_LANE
  local gpu=$1 stop=$2
  CUDA_VISIBLE_DEVICES=$gpu timeout 120 python3 bench/scratch_transfer.py --out "$W/scratch_transfer_h200.json" \
    >"$W/scratch_transfer.log" 2>&1
  echo "scratch_transfer exit $? at $(date -u +%T)" >>"$W/steps.txt"
  run compile_loop_rest "$gpu" "$(min $((stop - $(date +%s) - 40)) 200)" \
    --ops attention_forward,fused_moe,mla_decode_attention
  run compile_gdr_short "$gpu" $((stop - $(date +%s) - 40)) --ops gated_delta_rule_update --shapes 9,8,10,12,1,13,2
}
lane_b() {  # lane_b GPU END_OF_LANE
  local gpu=$1 stop=$2
  run compile_ua_multi "$gpu" "$(min $((stop - $(date +%s) - 40)) 170)" --ops unified_attention --shapes 16
  run compile_cgdr "$gpu" $((stop - $(date +%s) - 40)) --ops chunk_gated_delta_rule_state --select spread --per-op 12
}
if ((GPUS >= 2)); then
  lane_a 0 "$END" & lane_b 1 "$END"; wait
else
  lane_a 0 $(($(date +%s) + TOTAL / 2)); lane_b 0 "$END"
fi
tar czf "$DEST/c12.tar.gz" -C "$DEST" c12 && rm -rf "$W"
