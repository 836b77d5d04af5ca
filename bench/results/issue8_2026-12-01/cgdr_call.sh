#!/usr/bin/env bash
# One device call of the torch.compile remainder of chunk_gated_delta_rule_state (one H200), then
# the optimisation loop's paired-round check with the time left:
#  1. torch.compile, timed, alone on the GPU: the shapes with T <= 2048 that no run judged (each
#     compiles in 12-56 s); with --skip-judged, a shape judged by compile_combined or an earlier
#     call of this script is not judged again;
#  2. the two shapes c13's probes left undecided, T = 4096 (9) and T = 4195 (23), whose solo
#     compiles extrapolate to 105-108 s against the 120 s limit (judged alone, in catalog order);
#  3. bench/opt_loop_gpu.py (the paired rounds), when OPT_LOOP_S > 0 and that much time is left.
#   cgdr_call.sh DEST NAME TOTAL_S OPT_LOOP_S [EARLIER_CALL_DIR…]   -> DEST/NAME.tar.gz
set -u
DEST=${1:?usage: cgdr_call.sh DEST NAME TOTAL_S OPT_LOOP_S [EARLIER_CALL_DIR…]}
NAME=${2:?} TOTAL=${3:?} OPT_LOOP=${4:?}
shift 4
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30 D=bench/results/issue8_2026-12-01
CAL="$R/eager_combined $R/compile_combined $D/runs/c7 $D/runs/c8_loop_free $D/runs/c9_loop_free $D/runs/c9_loops $D/runs/c10/ua_single $D/runs/c10/paged_short $D/runs/c10/rest $D/runs/c10/gdr_short $D/runs/c11/compile_rest $D/runs/c12/compile_loop_rest $D/runs/c12/compile_gdr_short $D/runs/c12/compile_ua_multi $D/runs/c12/compile_cgdr $D/runs/c14/compile_ua $D/runs/c14/compile_gdr_short $D/runs/c14/compile_cgdr $D/runs/c15/compile_gdr_short $D/runs/c15/compile_cgdr"
EARLIER=$(for dir in "$@"; do ls -d "$dir"/compile_*/ 2>/dev/null; done)
END=$(($(date +%s) + TOTAL))
W=$DEST/$NAME
mkdir -p "$W"
left() { echo $((END - $(date +%s) - 40 - OPT_LOOP)); }
run() {  # run DIR BUDGET_S ARGS…  (torch.compile through baselines.py run, timed, one GPU)
  local dir=$1 budget=$2
  shift 2
  ((budget > 30)) || { echo "$dir skipped at $(date -u +%T)" >>"$W/steps.txt"; return; }
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 $((budget + 40)) python3 bench/baselines.py run --calibrate $CAL \
    --baseline torch-compile --no-profile --ops chunk_gated_delta_rule_state "$@" --budget-s "$budget" \
    --out "$W/$dir" >"$W/$dir.log" 2>&1
  echo "$dir exit $? at $(date -u +%T)" >>"$W/steps.txt"
}
# shellcheck disable=SC2086
run compile_cgdr_short "$(left)" --shapes 1,3,4,6,7,15,16,18,20,21 --skip-judged $D/compile_combined $EARLIER
# shellcheck disable=SC2086
run compile_cgdr_long "$(left)" --shapes 9,23 ${EARLIER:+--skip-judged $EARLIER}
OPT_S=$((END - $(date +%s) - 30))
if ((OPT_LOOP > 0 && OPT_S >= OPT_LOOP - 30)); then
  CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 $((OPT_S + 10)) python3 bench/opt_loop_gpu.py --deadline-s $((OPT_S - 50)) \
    --out-dir "$W/opt_loop" >"$W/opt_loop.log" 2>&1
  echo "opt_loop exit $? at $(date -u +%T)" >>"$W/steps.txt"
else
  echo "opt_loop skipped at $(date -u +%T) ($OPT_S s left)" >>"$W/steps.txt"
fi
tar czf "$DEST/$NAME.tar.gz" -C "$DEST" "$NAME" && rm -rf "$W"
