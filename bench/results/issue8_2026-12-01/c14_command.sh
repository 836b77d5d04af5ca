#!/usr/bin/env bash
# Call c14 (2026-12-01, second session): torch.compile, timed, one shape at a time on the one GPU.
#  1. unified_attention shapes the c13 probe compiled within the limit (argument 3; "none" for none);
#  2. gated_delta_rule_update's short shapes, T = 1 (8, 9) and T = 128-130 (1, 10, 12);
#  3. chunk_gated_delta_rule_state with T <= 2048, as many as the time left holds.
#   c14_command.sh DEST TOTAL_S UA_IDS   -> DEST/c14.tar.gz
set -u
DEST=${1:?usage: c14_command.sh DEST TOTAL_S UA_IDS}
TOTAL=${2:?}
UA_IDS=${3:?}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30 D=bench/results/issue8_2026-12-01
CAL="$R/eager_combined $R/compile_combined $D/runs/c7 $D/runs/c8_loop_free $D/runs/c9_loop_free $D/runs/c9_loops $D/runs/c10/ua_single $D/runs/c10/paged_short $D/runs/c10/rest $D/runs/c10/gdr_short $D/runs/c11/compile_rest $D/runs/c12/compile_loop_rest $D/runs/c12/compile_gdr_short $D/runs/c12/compile_ua_multi $D/runs/c12/compile_cgdr"
END=$(($(date +%s) + TOTAL))
W=$DEST/c14
mkdir -p "$W"
run() {  # run NAME BUDGET_S ARGS…  (torch.compile through baselines.py run, timed, one GPU)
  local name=$1 budget=$2
  shift 2
  ((budget > 30)) || { echo "$name skipped at $(date -u +%T)" >>"$W/steps.txt"; return; }
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 $((budget + 40)) python3 bench/baselines.py run --calibrate $CAL \
    --baseline torch-compile --no-profile "$@" --budget-s "$budget" --out "$W/$name" >"$W/$name.log" 2>&1
  echo "$name exit $? at $(date -u +%T)" >>"$W/steps.txt"
}
left() { echo $((END - $(date +%s) - 40)); }
min() { echo $(($1 < $2 ? $1 : $2)); }
[ "$UA_IDS" = none ] || run compile_ua "$(min "$(left)" 300)" --ops unified_attention --shapes "$UA_IDS"
run compile_gdr_short "$(min "$(left)" 240)" --ops gated_delta_rule_update --shapes 8,9,1,10,12
run compile_cgdr "$(left)" --ops chunk_gated_delta_rule_state --shapes 0,1,2,3,4,6,7,8,14,15,16,18,20,21
tar czf "$DEST/c14.tar.gz" -C "$DEST" c14 && rm -rf "$W"
