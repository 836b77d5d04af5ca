#!/usr/bin/env bash
# Does the product path work end to end on every operator that has a wiki kernel? The scripted
# agent submits each wiki kernel through the benchmark-mode server (bench run), the trusted side
# judges every submission on every scored shape with 5 seeds (bench eval), and bench report
# tables submissions, verdicts and S per operator. Wall time of each phase is recorded.
#
#   DEADLINE=560 bash measurements/scripted_agent_all_ops_gpu.sh
#
# Time-boxed and resumable: each phase gets what is left of DEADLINE seconds (counted from this
# call's start, RESERVE_S kept for the report), and is interrupted (SIGINT, then killed) when it
# runs out. Calling the script again continues: bench run skips finished operators and bench eval
# skips evaluated ones. The last line says COMPLETE or INCOMPLETE (call again).
#
# Environment (all optional):
#   DEADLINE=560      seconds this call may take (the device allows 600 per command)
#   STATE=runs/scripted_agent_all_ops   where the run lives (runs/ is git-ignored, so a warm
#                     device machine keeps it between calls)
#   OPS=...           comma-separated operators (default: every operator of gpu_wiki/kernels)
#   SHAPES=all        bench eval --shapes (all scored shapes; `smoke` for a CPU check)
#   SEEDS=5           bench eval --seeds
#   BASELINES=no      bench eval --baselines (yes also times eager and torch.compile: slower)
#   PARALLEL=4        bench run --parallel
#   BUDGET_MINUTES=10 bench run --budget-minutes (a run made elsewhere is resumed with its own)
#   AGENT_UID=same    bench run --agent-uid (the scripted agent is ours; `auto` isolates it)
#
# Results, in $OUT when set (else $STATE/out): report/ (report.md, report.html, report.json,
# figures), timings.tsv (call, phase, status, seconds: every call so far), states.tsv (per
# operator: agent outcome, evaluated, the first contract violation if any), env.txt, log.txt,
# and run_state.tar.gz (the run directory: unpack it under $STATE's parent to resume on a fresh
# machine, e.g. `mkdir -p runs && tar xzf run_state.tar.gz -C runs`).
set -u
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
DEADLINE=${DEADLINE:-560}
STATE=${STATE:-runs/scripted_agent_all_ops}
SHAPES=${SHAPES:-all}
SEEDS=${SEEDS:-5}
BASELINES=${BASELINES:-no}
PARALLEL=${PARALLEL:-4}
BUDGET_MINUTES=${BUDGET_MINUTES:-10}
AGENT_UID=${AGENT_UID:-same}
RESERVE_S=${RESERVE_S:-30}
START=$(date +%s)
RUN_DIR=$STATE/run
DEST=${OUT:-$STATE/out}
mkdir -p "$STATE" "$DEST"
LOG=$DEST/log.txt
TIMINGS=$STATE/timings.tsv
[ -f "$TIMINGS" ] || printf 'call\tphase\tstatus\tseconds\n' >"$TIMINGS"
CALL=$(($(grep -c . "$TIMINGS") > 1 ? $(cut -f1 "$TIMINGS" | tail -1) + 1 : 1))

if [ -z "${OPS:-}" ]; then
  OPS=$($PY -c '
import pathlib
from atrex_mcp.wiki.corpus import kernel_front_matter
paths = sorted(pathlib.Path("gpu_wiki/kernels").glob("[!_]*.py"))
print(",".join(sorted({kernel_front_matter(p.read_text(), p.name)[0]["operator"] for p in paths})))')
fi

left() { echo $((START + DEADLINE - RESERVE_S - $(date +%s))); }

# phase NAME CMD…: run within what is left of the deadline, log it, record status and seconds.
phase() {
  local name=$1 limit t0 rc status
  shift
  limit=$(left)
  if ((limit <= 5)); then
    printf '%s\t%s\tskipped: deadline\t0\n' "$CALL" "$name" >>"$TIMINGS"
    echo "[skipped: deadline] $name"
    return 1
  fi
  t0=$(date +%s)
  echo "=== call $CALL: $name (limit ${limit}s) $*" >>"$LOG"
  timeout -s INT --kill-after=20 "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  if ((rc == 0)); then status=ok; elif (($(date +%s) - t0 >= limit)); then status="deadline after ${limit}s"; else status="exit $rc"; fi
  printf '%s\t%s\t%s\t%s\n' "$CALL" "$name" "$status" $(($(date +%s) - t0)) >>"$TIMINGS"
  echo "[$status] $name $(($(date +%s) - t0))s"
  [ "$status" = ok ]
}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "no nvidia-smi"
  $PY -c 'import platform, torch, triton; print("python", platform.python_version(), "torch", torch.__version__, "triton", triton.__version__, "cuda", torch.cuda.is_available())'
  git rev-parse HEAD 2>/dev/null || echo "commit: not a git checkout"
  echo "ops: $OPS"
  echo "shapes: $SHAPES  seeds: $SEEDS  baselines: $BASELINES  parallel: $PARALLEL  agent uid: $AGENT_UID"
} >"$DEST/env.txt" 2>&1
cat "$DEST/env.txt"

AGENT="$PY examples/bench_scripted_agent.py --kernels gpu_wiki/kernels"
# eval runs even after an interrupted run: it judges what was collected, the next call the rest
phase run $PY -m atrex_mcp.cli bench run --agent "$AGENT" --ops "$OPS" --out "$RUN_DIR" --parallel "$PARALLEL" \
  --budget-minutes "$BUDGET_MINUTES" --agent-uid "$AGENT_UID" --plain
phase eval $PY -m atrex_mcp.cli bench eval "$RUN_DIR" --shapes "$SHAPES" --seeds "$SEEDS" --baselines "$BASELINES" --plain
RESERVE_S=0 phase report $PY -m atrex_mcp.cli bench report "$RUN_DIR"

# Per operator: how the agent ended, whether it was evaluated, and a contract failure's first rule.
COMPLETE=$($PY - "$RUN_DIR" "$DEST/states.tsv" <<'EOF'
import sys
from pathlib import Path
from atrex_mcp.agentbench.layout import RunLayout, RunStore
layout = RunLayout(Path(sys.argv[1]))
store = RunStore(layout)
ops = store.load_config().ops if store.exists() else []
rows, complete = ["op\tstatus\toutcome\tevaluated\tcontract"], bool(ops)
for op, state in store.states(ops).items():
    outcome = state.submission.outcome if state.submission else "-"
    evaluated = (layout.root / "eval" / f"{op}.json").is_file()
    complete &= state.status == "done" and (evaluated or outcome != "submitted")
    violation = state.submission.violations[0] if state.submission and state.submission.violations else ""
    rows.append(f"{op}\t{state.status}\t{outcome}\t{evaluated}\t{violation}")
Path(sys.argv[2]).write_text("\n".join(rows) + "\n")
print("COMPLETE" if complete else "INCOMPLETE")
EOF
)
cp "$TIMINGS" "$DEST/timings.tsv"
[ -d "$RUN_DIR/report" ] && rm -rf "$DEST/report" && cp -r "$RUN_DIR/report" "$DEST/report"
tar czf "$DEST/run_state.tar.gz" -C "$(dirname "$STATE")" "$(basename "$STATE")/run" "$(basename "$STATE")/timings.tsv" 2>>"$LOG"
column -t -s $'\t' "$DEST/states.tsv" 2>/dev/null || cat "$DEST/states.tsv"
column -t -s $'\t' "$TIMINGS" 2>/dev/null || cat "$TIMINGS"
[ -f "$DEST/report/report.md" ] && sed -n '1,60p' "$DEST/report/report.md"
echo "$COMPLETE ($(($(date +%s) - START))s this call; results in $DEST)"
