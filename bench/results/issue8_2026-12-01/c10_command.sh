#!/usr/bin/env bash
# Call c10 (2026-12-01, second session): the H200's HBM rate by read:write mix, then the
# torch.compile remainder of the loop operators in three steps, spread over all visible GPUs:
#  A. unified_attention's 13 single-sequence shapes (one sequence: one unrolled block), shortest first;
#  B. the short shapes of gated_delta_rule_update (T < 512; T = 512 and 3251 ran into the 120 s limit)
#     and paged_attention_decode (shape 0, 51 ms eager, is past the 25.6 ms shape that took 95 s);
#  C. every unjudged shape of attention_forward, fused_moe, mla_decode_attention,
#     fp8_blockscale_fused_moe and block_scaled_mm with the time left.
#   c10_command.sh DEST TOTAL_S   -> DEST/c10.tar.gz
set -u
DEST=${1:?usage: c10_command.sh DEST TOTAL_S}
TOTAL=${2:?}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30 D=bench/results/issue8_2026-12-01
CAL="$R/eager_combined $R/compile_combined $D/runs/c7 $D/runs/c8_loop_free $D/runs/c9_loop_free $D/runs/c9_loops"
END=$(($(date +%s) + TOTAL))
W=$DEST/c10
mkdir -p "$W"
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 bench/hbm_mix.py --out "$W/hbm_mix_h200.json" >"$W/hbm_mix.log" 2>&1
echo "hbm_mix exit $? at $(date -u +%T)" >>"$W/steps.txt"
step() {  # step DIR BUDGET_S ARGS…
  local dir=$1 budget=$2
  shift 2
  ((budget > 30)) || { echo "$dir skipped at $(date -u +%T)" >>"$W/steps.txt"; return; }
  # shellcheck disable=SC2086
  timeout --kill-after=10 $((budget + 40)) python3 bench/baselines.py run --baseline torch-compile --no-profile \
    --calibrate $CAL --skip-judged $D/compile_combined "$@" --budget-s "$budget" --out "$W/$dir" >"$W/$dir.log" 2>&1
  echo "$dir exit $? at $(date -u +%T)" >>"$W/steps.txt"
}
left() { echo $((END - $(date +%s) - ${1:-0})); }
step ua_single $(($(left 60) < 220 ? $(left 60) : 220)) --ops unified_attention --shapes 15,3,14,23,8,7,4,21,24,20,5,6,22
step gdr_short $(($(left 60) < 60 ? $(left 60) : 60)) --ops gated_delta_rule_update --shapes 9,8,10,12,1,13,2
step paged_short $(($(left 60) < 40 ? $(left 60) : 40)) --ops paged_attention_decode --shapes 5,7,4,3
step rest "$(left 50)" --ops attention_forward,fused_moe,mla_decode_attention,fp8_blockscale_fused_moe,block_scaled_mm
tar czf "$DEST/c10.tar.gz" -C "$DEST" c10 && rm -rf "$W"
