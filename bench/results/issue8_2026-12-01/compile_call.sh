#!/usr/bin/env bash
# One device call of the torch.compile remainder, spread over all visible GPUs, in two runs:
#  1. every shape no earlier run judged, of the operators whose reference has no Python loop over
#     the shape (their compile cost per shape is steady, so the cost model's budget fit holds),
#     within LOOP_FREE_S (call c7 ran this step alone over all 27 such operators and loop operators
#     attention_forward / block_scaled_mm);
#  2. operators whose reference loops in Python (Dynamo unrolls the loop, so a shape's compile time
#     grows with it: 1 s to over 120 s), a spread of up to PER_OP shapes each (evenly spaced by eager
#     time, shapes judged earlier left out), with the time left until TOTAL_S. LOOPS names them
#     (default: the six whose shapes compiled within the 120 s limit so far; unified_attention,
#     gated_delta_rule_update and chunk_gated_delta_rule_state get chosen shapes in their own step;
#     LOOPS= skips the step).
# Each run lists every shape it leaves out and why (run.json not_run).
#   compile_call.sh DEST NAME TOTAL_S LOOP_FREE_S PER_OP [EARLIER_RUN_DIR…]   -> DEST/NAME.tar.gz
set -u
DEST=${1:?usage: compile_call.sh DEST NAME TOTAL_S LOOP_FREE_S PER_OP [EARLIER_RUN_DIR…]}
NAME=${2:?} TOTAL=${3:?} LOOP_FREE=${4:?} PER_OP=${5:?}
shift 5
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30
END=$(($(date +%s) + TOTAL))
LOOPED=attention_forward,block_scaled_mm,fp8_blockscale_fused_moe,fused_moe,mla_decode_attention,paged_attention_decode,unified_attention,gated_delta_rule_update,chunk_gated_delta_rule_state
LOOPS=${LOOPS-attention_forward,block_scaled_mm,fp8_blockscale_fused_moe,fused_moe,mla_decode_attention,paged_attention_decode}
FREE=$(python3 -c "from atrex_mcp.catalog import Catalog
print(','.join(op for op in Catalog().names() if op not in '$LOOPED'.split(',')))")
mkdir -p "$DEST/$NAME"
step() {  # step DIR BUDGET_S ARGS…
  local dir=$1 budget=$2
  shift 2
  ((budget > 30)) || { echo "$dir skipped at $(date -u +%T)" >>"$DEST/$NAME/steps.txt"; return; }
  timeout --kill-after=10 $((budget + 40)) python3 bench/baselines.py run --baseline torch-compile --no-profile \
    --calibrate $R/eager_combined $R/compile_combined "$@" --budget-s "$budget" --out "$DEST/$NAME/$dir" \
    >"$DEST/$NAME/$dir.log" 2>&1
  echo "$dir exit $? at $(date -u +%T)" >>"$DEST/$NAME/steps.txt"
}
step loop_free "$LOOP_FREE" --ops "$FREE" --skip-judged $R/compile_combined "$@"
[ -z "$LOOPS" ] || step loops $((END - $(date +%s) - 40)) --ops "$LOOPS" --select spread --per-op "$PER_OP" --skip-judged $R/compile_combined "$@"
tar czf "$DEST/$NAME.tar.gz" -C "$DEST" "$NAME" && rm -rf "${DEST:?}/$NAME"
