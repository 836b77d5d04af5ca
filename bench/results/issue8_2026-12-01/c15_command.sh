#!/usr/bin/env bash
# Call c15 (2026-12-01, second session), the session's last:
#  1. torch.compile, timed, alone on the GPU: gated_delta_rule_update's shapes c14's budget left
#     (T = 1: 8, 9; T = 129: 10), then chunk_gated_delta_rule_state's shapes with T <= 2048 that c14
#     did not reach;
#  2. compile-limit probes (untimed, three lanes) on the three shapes c13's deadline stopped while
#     they compiled: unified_attention 1 and 9 (290 and 324 sequences), chunk_gated_delta_rule_state 10
#     (T = 8192).
#   c15_command.sh DEST TOTAL_S   -> DEST/c15.tar.gz
set -u
DEST=${1:?usage: c15_command.sh DEST TOTAL_S}
TOTAL=${2:?}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30 D=bench/results/issue8_2026-12-01
CAL="$R/eager_combined $R/compile_combined $D/runs/c7 $D/runs/c8_loop_free $D/runs/c9_loop_free $D/runs/c9_loops $D/runs/c10/ua_single $D/runs/c10/paged_short $D/runs/c10/rest $D/runs/c10/gdr_short $D/runs/c11/compile_rest $D/runs/c12/compile_loop_rest $D/runs/c12/compile_gdr_short $D/runs/c12/compile_ua_multi $D/runs/c12/compile_cgdr $D/runs/c14/compile_ua $D/runs/c14/compile_gdr_short $D/runs/c14/compile_cgdr"
END=$(($(date +%s) + TOTAL))
W=$DEST/c15
mkdir -p "$W"
PROBE_S=170  # one round of three lanes: worker start, the 120 s limit, the reference
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 200 python3 bench/baselines.py run --calibrate $CAL \
  --baseline torch-compile --no-profile --ops gated_delta_rule_update --shapes 8,9,10 --budget-s 170 \
  --out "$W/compile_gdr_short" >"$W/compile_gdr_short.log" 2>&1
echo "compile_gdr_short exit $? at $(date -u +%T)" >>"$W/steps.txt"
BUDGET=$((END - $(date +%s) - PROBE_S - 40))
if ((BUDGET > 30)); then
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 $((BUDGET + 30)) python3 bench/baselines.py run --calibrate $CAL \
    --baseline torch-compile --no-profile --ops chunk_gated_delta_rule_state --shapes 0,1,2,3,4,6,7,8,14,15,16,18,20,21 \
    --skip-judged $D/runs/c14/compile_cgdr --budget-s "$BUDGET" --out "$W/compile_cgdr" >"$W/compile_cgdr.log" 2>&1
  echo "compile_cgdr exit $? at $(date -u +%T)" >>"$W/steps.txt"
fi
PROBE_BUDGET=$((END - $(date +%s) - 20))
CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 $((PROBE_BUDGET + 30)) python3 bench/baselines.py run \
  --baseline torch-compile --no-profile --no-timing --lanes-per-gpu 3 --ops unified_attention,chunk_gated_delta_rule_state \
  --shapes unified_attention:1,unified_attention:9,chunk_gated_delta_rule_state:10 --budget-s "$PROBE_BUDGET" \
  --out "$W/compile_probe" >"$W/compile_probe.log" 2>&1
echo "compile_probe exit $? at $(date -u +%T)" >>"$W/steps.txt"
tar czf "$DEST/c15.tar.gz" -C "$DEST" c15 && rm -rf "$W"
