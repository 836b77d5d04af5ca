#!/usr/bin/env bash
# Call c8 (2026-12-01, nvidia-h200: one GPU, nothing else running on the host).
#  1. Stability with a quiet host: torch.compile twice, in two processes one after the other, on
#     the 14 host-bound shapes of the 2026-11-30 stability pair (c5/c6 ran beside another
#     evaluation on the same host) and, as GPU-bound controls, chunk_delta_rule_output's and
#     moe_sum_reduce's shapes of that pair.
#  2. The torch.compile remainder of the loop-free operators (compile_call.sh) with the time left.
#   c8_command.sh DEST TOTAL_S   -> DEST/c8.tar.gz
set -u
DEST=${1:?usage: c8_command.sh DEST TOTAL_S}
TOTAL=${2:?}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30
END=$(($(date +%s) + TOTAL))
W=$DEST/c8
mkdir -p "$W"
timeout --kill-after=10 400 python3 bench/stability.py --baseline torch-compile --work "$W/stability" --no-profile \
  --shapes-from $R/runs/c6_compile_again_gpu1 --budget-s 180 --calibrate $R/eager_combined $R/compile_combined \
  --ops attention_forward,fp8_blockscale_fused_moe,fused_moe,mla_decode_attention,moe_align_block_size,reshape_and_cache,chunk_delta_rule_output,moe_sum_reduce \
  >"$W/stability.log" 2>&1
echo "stability exit $? at $(date -u +%T)" >>"$W/steps.txt"
LOOPS= bash bench/results/issue8_2026-12-01/compile_call.sh "$W" rest $((END - $(date +%s) - 20)) \
  $((END - $(date +%s) - 60)) 1 bench/results/issue8_2026-12-01/runs/c7
echo "rest exit $? at $(date -u +%T)" >>"$W/steps.txt"
tar czf "$DEST/c8.tar.gz" -C "$DEST" c8 && rm -rf "$W"
