#!/usr/bin/env bash
# One device call on a two-GPU H200 machine that keeps both GPUs busy:
#   phase A  GPU 0: diagnostics, one after another (timing_accuracy with the write-flush column, the
#            rms_norm example and its side-stream exploit through the evaluator), then a torch.compile
#            probe (one shape per operator, median by eager time, for the compile cost) in the time left;
#            GPU 1 at the same time: the eager baseline on A_OPS.
#   phase B  both GPUs (one process each, measurements/multi_gpu.py's queue): the eager baseline on B_OPS,
#            operators an earlier call measured on one GPU, for the two-GPU speed-up, per-shape
#            agreement and run-to-run stability (measurements/multi_gpu.py speedup, measurements/stability.py --runs).
# (ncu_probe.py and timing_stalls.py ran in the calls of 2026-11-30 evening: measurements/results/.)
#
#   A_OPS=a,b B_OPS=c,d bash measurements/two_gpu_round.sh DEST [TOTAL_S=540] [A_S=330]
#
# Every step has a hard time limit; what a step wrote survives its limit. DEST gets one tarball
# (round.tar.gz) with a log per step and every result directory.
set -u
DEST=${1:?usage: A_OPS=… B_OPS=… bash measurements/two_gpu_round.sh DEST [TOTAL_S] [A_S]}
TOTAL=${2:-540}
A_S=${3:-330}
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
START=$(date +%s)
W=$(mktemp -d "${TMPDIR:-/tmp}/round.XXXXXX")
left() { echo $((START + TOTAL - $(date +%s))); }
step() {  # step NAME LIMIT_S CMD…
  local name=$1 limit=$2
  shift 2
  local t0 rc=skipped
  t0=$(date +%s)
  if ((limit > 5)); then
    timeout --kill-after=10 "$limit" "$@" >"$W/$name.log" 2>&1
    rc=$?
  fi
  printf '%s\texit %s\t%ss\n' "$name" "$rc" $(($(date +%s) - t0)) | tee -a "$W/steps.tsv"
}
{ date -u +%FT%TZ; nvidia-smi -L; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } >"$W/env.txt" 2>&1

step eager_A_gpu1 "$A_S" env CUDA_VISIBLE_DEVICES=1 python3 measurements/baselines.py run --baseline eager --ops "$A_OPS" \
  --budget-s $((A_S - 25)) --out "$W/eager_A_gpu1" &
export CUDA_VISIBLE_DEVICES=0
step timing_accuracy 130 python3 measurements/timing_accuracy.py --out "$W/timing_accuracy.json"
step rms_norm_smoke 120 python3 measurements/eval_gpu_smoke.py --examples rms_norm --exploits side_stream \
  --no-baselines --budget-s 90 --out "$W/smoke"
PROBE_S=$((A_S - $(date +%s) + START))
step compile_probe_gpu0 "$PROBE_S" python3 measurements/baselines.py run --baseline torch-compile --select spread --per-op 1 \
  --no-profile --budget-s $((PROBE_S - 20)) --out "$W/compile_probe_gpu0"
wait
unset CUDA_VISIBLE_DEVICES
step eager_B_gpus2 $(($(left) - 15)) python3 measurements/baselines.py run --baseline eager --gpus 2 --ops "$B_OPS" \
  --budget-s $(($(left) - 40)) --out "$W/eager_B_gpus2"
mkdir -p "$DEST"
tar czf "$DEST/round.tar.gz" -C "$W" . && rm -rf "$W"
echo "total $(($(date +%s) - START))s of ${TOTAL}s"
