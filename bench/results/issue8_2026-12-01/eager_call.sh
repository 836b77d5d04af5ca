#!/usr/bin/env bash
# One device call of the full eager set through the output arena (one H200): the eager reference
# as a candidate, every scored shape of the operators named, 5 seeds, timed, profiled (a candidate
# evaluation profiles, so the throughput figure includes it); with earlier calls' directories,
# the shapes they judged are not judged again (a deadline's leftovers move to the next call).
# Optional, from the environment: PROBE_S > 0 runs bench/worker_start_cost.py first (2 repeats,
# within PROBE_S seconds); RERUN="OP SHAPES" judges those shapes of one operator again, before the
# operators named (shapes an earlier call judged under code since changed).
#   eager_call.sh DEST NAME TOTAL_S OPS [EARLIER_CALL_DIR…]   -> DEST/NAME.tar.gz
set -u
DEST=${1:?usage: eager_call.sh DEST NAME TOTAL_S OPS [EARLIER_CALL_DIR…]}
NAME=${2:?} TOTAL=${3:?} OPS=${4:?}
shift 4
cd "$(dirname "$0")/../../.." || exit 2
EARLIER=$(for dir in "$@"; do ls -d "$dir"/eager/ 2>/dev/null; done)
W=$DEST/$NAME
mkdir -p "$W"
END=$(($(date +%s) + TOTAL - 30))
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv >"$W/gpu.txt" 2>&1
echo "start $(date -u +%T), ends by $(date -u -d @"$END" +%T)" >"$W/steps.txt"
eager() {  # eager DIR ARGS…  (the eager baseline through baselines.py run, timed and profiled, one GPU)
  local dir=$1 budget=$((END - $(date +%s) - 20))
  shift
  ((budget > 30)) || { echo "$dir skipped at $(date -u +%T)" >>"$W/steps.txt"; return; }
  CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 $((budget + 20)) python3 bench/baselines.py run --baseline eager "$@" \
    --budget-s "$budget" --out "$W/$dir" >"$W/$dir.log" 2>&1
  echo "$dir exit $? at $(date -u +%T) (budget $budget s)" >>"$W/steps.txt"
}
if ((${PROBE_S:-0} > 0)); then
  CUDA_VISIBLE_DEVICES=0 timeout --kill-after=5 "$PROBE_S" python3 bench/worker_start_cost.py --repeats 2 \
    --out "$W/worker_start_cost.json" >"$W/worker_start_cost.log" 2>&1
  echo "worker_start_cost exit $? at $(date -u +%T)" >>"$W/steps.txt"
fi
if [ -n "${RERUN:-}" ]; then
  read -r RERUN_OP RERUN_SHAPES <<<"$RERUN"
  eager rerun --ops "$RERUN_OP" --shapes "$RERUN_SHAPES"
fi
# shellcheck disable=SC2086
eager eager --ops "$OPS" ${EARLIER:+--skip-judged $EARLIER}
tar czf "$DEST/$NAME.tar.gz" -C "$DEST" "$NAME" && rm -rf "$W"
