#!/usr/bin/env bash
# One device call of the full eager set through the output arena (one H200): the eager reference
# as a candidate, every scored shape of the operators named, 5 seeds, timed, profiled (a candidate
# evaluation profiles, so the throughput figure includes it); with earlier calls' directories,
# the shapes they judged are not judged again (a deadline's leftovers move to the next call).
#   eager_call.sh DEST NAME TOTAL_S OPS [EARLIER_CALL_DIR…]   -> DEST/NAME.tar.gz
set -u
DEST=${1:?usage: eager_call.sh DEST NAME TOTAL_S OPS [EARLIER_CALL_DIR…]}
NAME=${2:?} TOTAL=${3:?} OPS=${4:?}
shift 4
cd "$(dirname "$0")/../../.." || exit 2
EARLIER=$(for dir in "$@"; do ls -d "$dir"/eager/ 2>/dev/null; done)
W=$DEST/$NAME
mkdir -p "$W"
BUDGET=$((TOTAL - 30))
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv >"$W/gpu.txt" 2>&1
echo "start $(date -u +%T), budget $BUDGET s" >"$W/steps.txt"
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 $((BUDGET + 20)) python3 bench/baselines.py run --baseline eager \
  --ops "$OPS" --budget-s "$BUDGET" ${EARLIER:+--skip-judged $EARLIER} --out "$W/eager" >"$W/eager.log" 2>&1
echo "eager exit $? at $(date -u +%T)" >>"$W/steps.txt"
tar czf "$DEST/$NAME.tar.gz" -C "$DEST" "$NAME" && rm -rf "$W"
