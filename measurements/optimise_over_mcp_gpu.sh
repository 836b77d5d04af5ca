#!/usr/bin/env bash
# The optimisation loop over MCP on one GPU: three pairs, each an earlier kernel -> the wiki's
# kernel, in one call of measurements/optimise_over_mcp.py (its docstring says what each step costs).
#
#   bash measurements/optimise_over_mcp_gpu.sh OUT_DIR [BUDGET_S]
#   bash measurements/optimise_over_mcp_gpu.sh --extract-only   # the baselines only
#
# The two history baselines (earlier versions of the wiki kernels) are not kept as copies: the
# script takes them from git history into BASELINES (default .cache/loop_baselines, git-ignored)
# when they are missing there. On a host without the history (a device that gets the tree
# without .git), extract them first in a checkout that has it and send that folder along:
#   BASELINES=.cache/loop_baselines bash measurements/optimise_over_mcp_gpu.sh --extract-only
#
# Shapes: a pair's fixed cost (six sandbox worker starts, each compiling its kernels afresh, and two
# Nsight Compute captures) is most of its time, so each pair gets few, cheap shapes on which its
# baseline was judged correct: rms_norm 2 and 52 (the 2026-12-01 opt_loop pair), unified_attention
# 24 (one long head-dim-256 sequence; reference 10 ms a call), fused_moe 4 (T 1979 on 8 experts,
# the multi-chunk routing path; reference 4 ms). Cheapest pair first: a pair that ends under its
# share leaves the rest to the later ones.
set -uo pipefail
b=${BASELINES:-.cache/loop_baselines} k=measurements/kernels w=gpu_wiki/kernels ua=unified_attention
declare -A history=([fused_moe_torch_routing.py]="f6b0df1:gpu_wiki/kernels/fused_moe.py"
  [unified_attention_first_tiles.py]="304b81e:gpu_wiki/kernels/unified_attention.py")
mkdir -p "$b"
for name in "${!history[@]}"; do
  if [ ! -s "$b/$name" ] && ! git show "${history[$name]}" >"$b/$name" 2>/dev/null; then
    rm -f "$b/$name"
    echo "optimise_over_mcp_gpu: no $b/$name and no git history to take it from (git show ${history[$name]});" \
      "extract it on a checkout with history (--extract-only) and send $b along" >&2
    exit 2
  fi
done
[ "${1:-}" = --extract-only ] && exit 0
out=${1:?usage: optimise_over_mcp_gpu.sh OUT_DIR [BUDGET_S] | --extract-only}
budget=${2:-200}
exec python3 measurements/optimise_over_mcp.py --out "$out" --budget-s "$budget" \
  --shapes rms_norm=2,52 --shapes unified_attention=24 --shapes fused_moe=4 \
  --pair "rms_norm:$k/rms_norm_two_pass.py:$w/rms_norm.py:$k/rms_norm_plan.json" \
  --pair "unified_attention:$b/unified_attention_first_tiles.py:$w/unified_attention.py:$k/${ua}_plan.json" \
  --pair "fused_moe:$b/fused_moe_torch_routing.py:$w/fused_moe.py:$k/fused_moe_plan.json"
