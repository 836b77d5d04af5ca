#!/usr/bin/env bash
# The optimisation loop over MCP on one GPU: three pairs, each an earlier kernel -> the wiki's
# kernel, in one call of measurements/optimise_over_mcp.py (its docstring says what each step costs).
#
#   bash measurements/optimise_over_mcp_gpu.sh OUT_DIR [BUDGET_S]
#
# The two history baselines are not in the tree; before the call, in a checkout with history:
#   mkdir -p .lead/baselines
#   git show f6b0df1:gpu_wiki/kernels/fused_moe.py > .lead/baselines/fused_moe_torch_routing.py
#   git show 304b81e:gpu_wiki/kernels/unified_attention.py > .lead/baselines/unified_attention_first_tiles.py
# and carry .lead/baselines with the device call (.lead is git-ignored).
#
# Shapes: a pair's fixed cost (six sandbox worker starts, each compiling its kernels afresh, and two
# Nsight Compute captures) is most of its time, so each pair gets few, cheap shapes on which its
# baseline was judged correct: rms_norm 2 and 52 (the 2026-12-01 opt_loop pair), unified_attention
# 24 (one long head-dim-256 sequence; reference 10 ms a call), fused_moe 4 (T 1979 on 8 experts,
# the multi-chunk routing path; reference 4 ms). Cheapest pair first: a pair that ends under its
# share leaves the rest to the later ones.
set -uo pipefail
out=${1:?usage: optimise_over_mcp_gpu.sh OUT_DIR [BUDGET_S]}
budget=${2:-200}
b=.lead/baselines k=measurements/kernels w=gpu_wiki/kernels ua=unified_attention
for f in $b/fused_moe_torch_routing.py $b/unified_attention_first_tiles.py; do
  if [ ! -f "$f" ]; then
    echo "optimise_over_mcp_gpu: no $f (extract it with git show, see the header; carry $b)" >&2
    exit 2
  fi
done
exec python3 measurements/optimise_over_mcp.py --out "$out" --budget-s "$budget" \
  --shapes rms_norm=2,52 --shapes unified_attention=24 --shapes fused_moe=4 \
  --pair "rms_norm:$k/rms_norm_two_pass.py:$w/rms_norm.py:$k/rms_norm_plan.json" \
  --pair "unified_attention:$b/unified_attention_first_tiles.py:$w/unified_attention.py:$k/${ua}_plan.json" \
  --pair "fused_moe:$b/fused_moe_torch_routing.py:$w/fused_moe.py:$k/fused_moe_plan.json"
