#!/usr/bin/env bash
# One distributed GPU session (machines of 2, 4 or 8 GPUs): smoke run, GPU tests, benchmark.
# Usage (repo root, wheels carried in .whl/): tools/dist_session.sh RANKS [TEST_SCRIPTS] [BENCH_ARGS...]
# Logs and results go to $OUT (the device tool brings them back).
set -uo pipefail
ranks=${1:-2}; scripts=${2:-bicgk,gemver,axpydot,overlap}; shift 2 || true
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1
python3 setup.py -q build_ext --inplace >>"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD FUSEC_CACHE_DIR=/tmp/fusec-cache FUSEC_TEST_CACHE_DIR=/tmp/fusec-cache \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 \
  TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
run() { timeout "$1" mpirun --bind-to none -x PYTHONPATH -x FUSEC_CACHE_DIR -x NCCL_NVLS_ENABLE \
  -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -n "$ranks" python3 -m mpi4py "${@:2}"; }
run 240 examples/distributed_bicgk.py --n 16384 2>&1 | tee "$OUT/smoke.log"
FUSEC_TEST_DIST_RANKS=$ranks FUSEC_TEST_DIST_SCRIPTS=$scripts timeout ${TEST_S:-240} \
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_distributed.py 2>&1 | tee "$OUT/tests.log" | tail -15
run ${BENCH_S:-240} -m bench.distributed --out "$OUT/results" "$@" 2>&1 | tee "$OUT/bench.log" | tail -40
