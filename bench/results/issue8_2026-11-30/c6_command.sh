#!/usr/bin/env bash
# Call c6 (2026-11-30, nvidia-h200-x2), exactly as run: two lanes, one per GPU, each a sequence of
# bench/baselines.py runs under hard limits; DEST gets c6.tar.gz.
#   GPU 0: torch.compile on the 8 operators call c5 had no time for (3 shapes each, spread by eager
#          time), then eager on the shapes of per_token_group_quant_fp8 and block_scaled_mm no call
#          has judged yet (cheapest first).
#   GPU 1: torch.compile again on 16 operators' shapes of call c5 (a second, separate process:
#          run-to-run stability), then eager on unified_attention's unjudged shapes (cheapest first).
set -u
DEST=${1:?usage: c6_command.sh DEST [TOTAL_S]}
TOTAL=${2:-550}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30
W=$DEST/c6
mkdir -p "$W"
END=$(($(date +%s) + TOTAL))
run() {  # run NAME LIMIT_S ARGS… (one bench/baselines.py run)
  local name=$1 limit=$2
  shift 2
  ((limit > 20)) || { echo "$name skipped" >>"$W/steps.txt"; return; }
  timeout --kill-after=10 "$limit" python3 bench/baselines.py run "$@" --budget-s $((limit - 15)) --out "$W/$name" \
    --calibrate $R/eager_combined $R/compile_combined >"$W/$name.log" 2>&1
  echo "$name exit $? at $(date -u +%T)" >>"$W/steps.txt"
}
left() { echo $((END - $(date +%s))); }
(
  export CUDA_VISIBLE_DEVICES=0
  run compile_rest_gpu0 250 --baseline torch-compile --select spread --per-op 3 --no-profile \
    --ops causal_conv1d,fp8_dynamic_per_token_quant,fused_qk_rmsnorm,fused_qkv_rope,layer_norm,moe_count_and_sort,moe_topk_gating_softmax,rms_norm
  run eager_ptgq_gpu0 80 --baseline eager --ops per_token_group_quant_fp8 --shapes 10,11,0,12,13,14,15,1,16,2,3,4,17
  run eager_bsmm_gpu0 "$(left)" --baseline eager --ops block_scaled_mm \
    --shapes 1,0,12,2,3,13,14,4,15,5,6,16,7,17,8,18,9,19,20,10,21
) &
(
  export CUDA_VISIBLE_DEVICES=1
  run compile_again_gpu1 300 --baseline torch-compile --no-profile --shapes-from $R/runs/c5_gpus2 \
    --ops attention_forward,chunk_delta_rule_output,fp8_blockscale_fused_moe,fused_add_rms_norm,fused_moe,gated_rms_norm,l2_norm,linear_sigmoid_mul,mla_decode_attention,moe_align_block_size,moe_sum_reduce,mrope,per_token_group_quant_fp8,reshape_and_cache,silu_and_mul,topk_filter
  run eager_ua_gpu1 "$(left)" --baseline eager --ops unified_attention --shapes 20,0,1,6,9,22,2,10,11,18,12
) &
wait
tar czf "$DEST/c6.tar.gz" -C "$DEST" c6 && rm -rf "$W"
