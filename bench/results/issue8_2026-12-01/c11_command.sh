#!/usr/bin/env bash
# Call c11 (2026-12-01): two lanes, one GPU each (one after the other on a one-GPU machine).
#  A (GPU 0): where the scratch directory's files live (transfer cost); the copied-output-cache
#     exploit under the old and the new timing plan (bench/reuse_cache_exploit.py); then the eager
#     baseline again, with the new plan, on shapes whose sets and calls the plan changed, to compare
#     with the 2026-11-30 eager times (bench/stability.py --runs) and to time the new plan.
#  B (GPU 1): torch.compile on every unjudged shape of attention_forward, block_scaled_mm, fused_moe,
#     mla_decode_attention and paged_attention_decode, then gated_delta_rule_update's short shapes
#     (T <= 258; from T = 512 on the compile ran past the 120 s limit).
#   c11_command.sh DEST TOTAL_S   -> DEST/c11.tar.gz
set -u
DEST=${1:?usage: c11_command.sh DEST TOTAL_S}
TOTAL=${2:?}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30 D=bench/results/issue8_2026-12-01 C10=bench/results/issue8_2026-12-01/runs/c10
CAL="$R/eager_combined $R/compile_combined $D/runs/c7 $D/runs/c8_loop_free $D/runs/c9_loop_free $D/runs/c9_loops $C10/ua_single $C10/paged_short $C10/rest"
JUDGED="$D/compile_combined $C10/ua_single $C10/paged_short $C10/rest"
END=$(($(date +%s) + TOTAL))
W=$DEST/c11
mkdir -p "$W"
GPUS=$(nvidia-smi -L | wc -l)
left() { echo $((END - $(date +%s) - ${1:-0})); }
run() {  # run NAME GPU BUDGET_S ARGS…  (baselines.py run, one GPU)
  local name=$1 gpu=$2 budget=$3
  shift 3
  ((budget > 30)) || { echo "$name skipped at $(date -u +%T)" >>"$W/steps.txt"; return; }
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=$gpu timeout --kill-after=10 $((budget + 40)) python3 bench/baselines.py run --calibrate $CAL \
    "$@" --budget-s "$budget" --out "$W/$name" >"$W/$name.log" 2>&1
  echo "$name exit $? at $(date -u +%T)" >>"$W/steps.txt"
}
lane_a() {
  { df -h /tmp /dev/shm; mount | grep -E ' (/tmp|/dev/shm|/) '; python3 -c "import tempfile; print(tempfile.gettempdir())"; } >"$W/storage.txt" 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 300 python3 bench/reuse_cache_exploit.py --out "$W/reuse_cache_exploit_h200.json" \
    >"$W/reuse_cache_exploit.log" 2>&1
  echo "reuse_cache_exploit exit $? at $(date -u +%T)" >>"$W/steps.txt"
  run eager_new_plan 0 "$(left "${1:-60}")" --baseline eager --shapes \
    silu_and_mul:7,silu_and_mul:8,l2_norm:12,chunk_delta_rule_output:15,layer_norm:9,causal_conv1d:8,per_token_group_quant_fp8:16,per_token_group_quant_fp8:8,fused_moe:8,fused_moe:12,fused_moe:14,block_scaled_mm:9,block_scaled_mm:19,fp8_blockscale_fused_moe:3,attention_forward:9,unified_attention:2,unified_attention:17,chunk_gated_delta_rule_state:17,chunk_gated_delta_rule_state:24
}
lane_b() {
  local gpu=$1
  run compile_rest "$gpu" "$(($(left 60) < 330 ? $(left 60) : 330))" --baseline torch-compile --no-profile --skip-judged $JUDGED \
    --ops attention_forward,block_scaled_mm,fused_moe,mla_decode_attention,paged_attention_decode
  run compile_gdr_short "$gpu" "$(left 50)" --baseline torch-compile --no-profile --skip-judged $JUDGED \
    --ops gated_delta_rule_update --shapes 9,8,10,12,1,13,2
}
if ((GPUS >= 2)); then
  lane_a 60 & lane_b 1; wait
else
  lane_a $((TOTAL / 2)); lane_b 0
fi
tar czf "$DEST/c11.tar.gz" -C "$DEST" c11 && rm -rf "$W"
