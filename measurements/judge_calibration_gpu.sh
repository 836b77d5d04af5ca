#!/usr/bin/env bash
# Baselines and judge calibration on the GPU within one wall-clock budget, the most valuable measurements first:
#   1. launch floor (seconds)            measurements/launch_floor.py measure
#   2. timing accuracy vs ncu (~1 min)   measurements/timing_accuracy.py
#   3. eager baseline, representative shapes within 40 % of what is left
#   4. torch.compile baseline on the rest
#   The STABILITY baseline (default torch-compile) runs twice in separate processes on the same
#   shapes; STABILITY=eager spends a short budget on more shapes (no compile per shape).
#   5. tables (h200, h200-measured), S beside S_floor, calibrated cost model, summary
#
#   bash measurements/judge_calibration_gpu.sh BUDGET_S [DEST]
#     DEST: where the few result files go (default $OUT on the device machine, else measurements/results/baselines/DATE_GPU)
#   STEPS=floor,accuracy,eager,tc   the steps to run (default all; e.g. STEPS=eager in a later call)
#   EAGER_ARGS / TC_ARGS            extra measurements/baselines.py options, e.g. EAGER_ARGS="--ops a,b" (replaces --select)
#   STABILITY=torch-compile|eager   the baseline run twice for the stability figures
#   EAGER_PCT=40                    eager's share of the time left after steps 1-2 (torch.compile gets the rest)
#
# Everything is written to a work directory, then bundled: DEST gets summary.md, summary.json,
# log.txt and judge_calibration_results.tar.gz (per-operator EvalResults, run.json files, tables, raw
# floor/accuracy/stability JSON). Unpack with: tar xzf judge_calibration_results.tar.gz -C measurements/results/baselines/DATE_GPU
# Without a GPU every script runs as a dry run ("not timed: no GPU"): use a small budget to
# check the whole chain on CPU before spending device time.
set -u
BUDGET=${1:?usage: bash measurements/judge_calibration_gpu.sh BUDGET_S [DEST]}
DEST=${2:-${OUT:-measurements/results/baselines/DATE_GPU}}
STEPS=${STEPS:-floor,accuracy,eager,tc}
EAGER_ARGS=${EAGER_ARGS:---select representative}
TC_ARGS=${TC_ARGS:---select representative}
STABILITY=${STABILITY:-torch-compile}
EAGER_PCT=${EAGER_PCT:-40}
RESERVE_S=40  # tables, report and bundle at the end
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
START=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/judge_calibration.XXXXXX")
LOG=$WORK/log.txt
mkdir -p "$DEST"

left() { echo $((START + BUDGET - $(date +%s))); }
want() { [[ ",$STEPS," == *",$1,"* ]]; }

# step NAME LIMIT_S CMD…: run with a hard time limit, log everything, record status and seconds.
step() {
  local name=$1 limit=$2 t0 rc status
  shift 2
  if ((limit <= 0)); then
    printf '%s\tskipped: budget\t0\n' "$name" >>"$WORK/steps.tsv"
    echo "[skip] $name (budget)"
    return
  fi
  t0=$(date +%s)
  echo "=== $name (limit ${limit}s) $*" >>"$LOG"
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  case $rc in 0) status=ok ;; 124 | 137) status="timeout after ${limit}s" ;; *) status="exit $rc" ;; esac
  printf '%s\t%s\t%s\n' "$name" "$status" $(($(date +%s) - t0)) >>"$WORK/steps.tsv"
  echo "[$status] $name $(($(date +%s) - t0))s"
}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,memory.total --format=csv 2>&1 || echo "no nvidia-smi"
  $PY -c 'import platform, torch, triton; print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "gpus", torch.cuda.device_count())'
  (ncu --version 2>/dev/null || echo "no ncu") | tail -1
  git rev-parse HEAD 2>/dev/null || echo "commit: not a git checkout"
} >"$WORK/env.txt" 2>&1
cat "$WORK/env.txt"

want floor && step launch_floor $(($(left) < 90 ? $(left) - RESERVE_S : 90)) \
  $PY measurements/launch_floor.py measure --out "$WORK/launch_floor.json"
want accuracy && step timing_accuracy $(($(left) - RESERVE_S < 180 ? $(left) - RESERVE_S : 180)) \
  $PY measurements/timing_accuracy.py --out "$WORK/timing_accuracy.json"

# Each baseline run stops itself at its --budget-s (evaluations still running are cancelled);
# GRACE_S on top is for merging and tables, and `timeout` is only the backstop. The stability
# baseline runs twice (A, then B on exactly A's shapes); the other once. Shares of the time
# left: eager EAGER_PCT, torch.compile the rest (it compiles every shape).
GRACE_S=20
ran=()
baseline_step() {  # baseline_step NAME KIND SHARE_PERCENT EXTRA_ARGS
  local name=$1 kind=$2 pct=$3 extra=$4 budget runs=1
  [[ $kind == "$STABILITY" ]] && runs=2
  budget=$(( ($(left) - RESERVE_S - runs * GRACE_S) * pct / 100 / runs ))
  if ((runs == 2)); then
    # shellcheck disable=SC2086  # extra is a list of options
    step "${name}_twice" $((runs * (budget + GRACE_S))) $PY measurements/stability.py --work "$WORK/$name" --baseline "$kind" \
      --budget-s "$budget" $extra
  else
    # shellcheck disable=SC2086
    step "$name" $((budget + GRACE_S)) $PY measurements/baselines.py run --baseline "$kind" --out "$WORK/$name/a" \
      --budget-s "$budget" $extra
  fi
  ran+=("$WORK/$name/a")
}
if want eager; then
  pct=100
  want tc && pct=$EAGER_PCT
  baseline_step eager eager "$pct" "$EAGER_ARGS"
fi
want tc && baseline_step tc torch-compile 100 "$TC_ARGS"

# Results that exist, whatever failed above.
dirs=()
for d in "${ran[@]}"; do [[ -f $d/run.json ]] && dirs+=("$d"); done
if ((${#dirs[@]})); then
  step tables 60 $PY measurements/baselines.py table "${dirs[@]}" --out "$WORK/table"
  [[ -f $WORK/launch_floor.json ]] && step floor_scores 60 $PY measurements/launch_floor.py score --floor "$WORK/launch_floor.json" \
    "${dirs[@]}" --out "$WORK/floor_scores"
  $PY measurements/baselines.py plan --calibrate "${dirs[@]}" --split-s 540 >"$WORK/plan_calibrated.txt" 2>&1
fi
$PY measurements/judge_calibration_report.py "$WORK" >/dev/null 2>>"$LOG"
cat "$WORK/summary.md" 2>/dev/null || tail -50 "$LOG"
cp "$WORK/summary.md" "$WORK/summary.json" "$LOG" "$DEST/" 2>/dev/null
tar czf "$DEST/judge_calibration_results.tar.gz" -C "$WORK" --exclude=log.txt . && rm -rf "$WORK"
echo "total $(($(date +%s) - START))s of ${BUDGET}s; files in $DEST: $(ls "$DEST" | tr '\n' ' ')"
