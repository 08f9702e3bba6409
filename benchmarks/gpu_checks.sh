#!/usr/bin/env bash
# Every GPU check in one call of a lent GPU machine: each section of bench_gpu.py in its own process and time limit
# (a section that fails or runs out of time leaves the others' rows), logs under $OUT (or ./gpu-logs).
#
#     bash benchmarks/gpu_checks.sh [SCALE]     # SCALE: 1 (default) or 2, 4 ... for longer runs (time limits x SCALE)
#
# Wheels the machine lacks (httpx2 and its needs: torch 2.11 / transformers 5.17 machines have none) travel in .whl/
# (benchmarks/README.md, "GPU"); they are installed into /tmp/site first.
set -u
out=${OUT:-gpu-logs}
scale=${1:-1}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
nproc | tee -a "$out/gpu.txt"

section() {  # name, log name, seconds (before SCALE), bench_gpu.py arguments
    local name=$1 log=$2 limit=$(($3 * scale))
    shift 3
    echo "== $log (limit ${limit}s)"
    timeout "$limit" python3 benchmarks/bench_gpu.py --sections "$name" "$@" >"$out/$log.log" 2>&1
    echo "exit $?" >>"$out/$log.log"
    grep -v "^USDT\|Writing model shards" "$out/$log.log" | tail -n 45
}

section exactness exactness 60
section inference inference 240 --sentences 768  # repeats 2: the first timed pass may capture (graphs dropped by growth)
section training training 90 --train-steps 2
section embed embed 120
section profile profile64 60 --profile-batch-size 64
section profile profile1 60 --profile-batch-size 1
