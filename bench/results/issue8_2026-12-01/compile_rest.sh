#!/usr/bin/env bash
# torch.compile on every shape of 27 operators that no earlier run has judged, spread over all
# visible GPUs, within BUDGET_S (the run leaves out what its cost model says will not fit and
# lists it). unified_attention, chunk_gated_delta_rule_state and gated_delta_rule_update are left
# to compile_loops.sh: their references loop in Python, so Dynamo unrolls a graph whose size
# (and compile time) grows with the shape, which a per-operator compile cost does not predict.
#   compile_rest.sh DEST NAME BUDGET_S [EARLIER_RUN_DIR…]   -> DEST/NAME.tar.gz
set -u
DEST=${1:?usage: compile_rest.sh DEST NAME BUDGET_S [EARLIER_RUN_DIR…]}
NAME=${2:?} BUDGET=${3:?}
shift 3
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30
OPS=$(python3 -c "from atrex_mcp.catalog import Catalog
loops = {'unified_attention', 'chunk_gated_delta_rule_state', 'gated_delta_rule_update'}
print(','.join(op for op in Catalog().names() if op not in loops))")
timeout --kill-after=10 $((BUDGET + 45)) python3 bench/baselines.py run --baseline torch-compile --no-profile --ops "$OPS" \
  --skip-judged $R/compile_combined "$@" --calibrate $R/eager_combined $R/compile_combined \
  --budget-s "$BUDGET" --out "$DEST/$NAME" >"$DEST/$NAME.log" 2>&1
echo "exit $? at $(date -u +%T)" >>"$DEST/$NAME.log"
tar czf "$DEST/$NAME.tar.gz" -C "$DEST" "$NAME" && rm -rf "${DEST:?}/$NAME"
