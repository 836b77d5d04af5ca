#!/usr/bin/env bash
# Call c13 (2026-12-01, second session): torch.compile compile-limit probes. Untimed
# (`baselines.py run --no-timing`), seven lanes sharing the one GPU: compile and 5-seed
# correctness only, so no time is measured while lanes share the device. The shapes are those whose
# compile is expected to run past the 120 s limit, from their measured neighbours:
#   unified_attention, 118-3095 sequences of 256 tokens (18 sequences compiled in 13 s; 118 was
#     still compiling after 91 s in the 2026-11-30 probe);
#   gated_delta_rule_update, T = 256 and T >= 544 (T = 258 and 512 ran past the limit);
#   chunk_gated_delta_rule_state, T >= 4096 (T = 2048 compiled in 48-56 s).
# Controls with a known solo compile time, to measure what the lanes cost each other:
#   chunk_gated_delta_rule_state 5 (55.6 s solo) and unified_attention 16 (13 s solo).
# A probe's compile timeout is a verdict; a shape it passes is timed later, alone.
#   c13_command.sh DEST TOTAL_S   -> DEST/c13.tar.gz
set -u
DEST=${1:?usage: c13_command.sh DEST TOTAL_S}
TOTAL=${2:?}
cd "$(dirname "$0")/../../.." || exit 2
R=bench/results/issue8_2026-11-30 D=bench/results/issue8_2026-12-01
CAL="$R/eager_combined $R/compile_combined $D/runs/c7 $D/runs/c8_loop_free $D/runs/c9_loop_free $D/runs/c9_loops $D/runs/c10/ua_single $D/runs/c10/paged_short $D/runs/c10/rest $D/runs/c10/gdr_short $D/runs/c11/compile_rest $D/runs/c12/compile_loop_rest $D/runs/c12/compile_gdr_short $D/runs/c12/compile_ua_multi $D/runs/c12/compile_cgdr"
UA=unified_attention GDR=gated_delta_rule_update CGDR=chunk_gated_delta_rule_state
SHAPES="$UA:0,$UA:1,$UA:2,$UA:9,$UA:10,$UA:11,$UA:12,$UA:13,$UA:17,$UA:18,$UA:19,$UA:16"
SHAPES="$SHAPES,$GDR:3,$GDR:4,$GDR:5,$GDR:6,$GDR:7,$GDR:13,$GDR:15,$GDR:16"
SHAPES="$SHAPES,$CGDR:9,$CGDR:10,$CGDR:11,$CGDR:12,$CGDR:23,$CGDR:24,$CGDR:5"
W=$DEST/c13
mkdir -p "$W"
{ nproc; nvidia-smi -L; date -u +%FT%TZ; } >"$W/host.txt"
(while sleep 10; do echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; done) >"$W/loadavg.txt" &
SAMPLER=$!
BUDGET=$((TOTAL - 45))
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES=0 timeout --kill-after=10 $((BUDGET + 30)) python3 bench/baselines.py run --calibrate $CAL \
  --baseline torch-compile --no-profile --no-timing --lanes-per-gpu 7 --ops $UA,$GDR,$CGDR --shapes "$SHAPES" \
  --budget-s "$BUDGET" --out "$W/compile_probe" >"$W/compile_probe.log" 2>&1
echo "compile_probe exit $? at $(date -u +%T)" >>"$W/steps.txt"
kill $SAMPLER
tar czf "$DEST/c13.tar.gz" -C "$DEST" c13 && rm -rf "$W"
