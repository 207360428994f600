#!/usr/bin/env bash
# One GPU session on the device machine: install, test, sanitize, run, time.
# Usage (in the repo root, wheels carried in .whl/):  tools/gpu_session.sh STAGE...
# Stages: smoke, train, draw, programs, tests, sanitize, run, sweep, fusion-bench, perfdb, prediction, tune, peers, sweeps,
# horizontal-bench, horizontal-sanitize, striped-sanitize, held-sanitize, sanitize-prepared, graphs (bench.graphs), binding (the binding A/B), cache-hints, striped-variants, save-cache (the
# tuning cache into the logs, to carry to a later machine as .fusec-cache/tuning), retune (bench.retune:
# tune every bench.peers point without a usable plan, under $RETUNE_BUDGET seconds, shipping each winner
# into fusec/data/blas/tunings; the folder comes back in the logs as tunings/, to commit).
# Logs and results go to $LOG (default /tmp/fusec-logs), packed into $OUT/session.tgz at the end
# (the device tool brings back at most 8 files). SANITIZE_K: the tests sanitize runs (pytest -k;
# default numpy_against_oracle), SANITIZE_SIZES their sizes. With no stage it installs and stops; SKIP_INSTALL=1 then
# lets two sessions run side by side, one GPU each (CUDA_VISIBLE_DEVICES, LOG and OUT of their own).
set -uo pipefail
FINAL_OUT=${OUT:-$PWD/out}
OUT=${LOG:-/tmp/fusec-logs}
mkdir -p "$OUT" "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/session.tgz" -C "$OUT" . ; ls -la "$OUT"' EXIT
export PYTHONUNBUFFERED=1
if [ -z "${SKIP_INSTALL:-}" ]; then  # set by a second session running beside a first (one GPU each)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1 \
    || { cat "$OUT/install.log"; exit 1; }
  python3 setup.py -q build_ext --inplace >>"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }  # the launch binding
fi
export PYTHONPATH=/tmp/site:$PWD
export FUSEC_CACHE_DIR=${FUSEC_CACHE_DIR:-/tmp/fusec-cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
status=0
for stage in "$@"; do
  case $stage in
    smoke)
      python3 -m fusec.cli run scripts/bicgk.script --library fusec/data/blas --size n=1000 2>&1 | tee "$OUT/smoke.log" || status=1 ;;
    programs)
      python3 -m pytest -q -p no:cacheprovider tests/gpu/test_programs.py 2>&1 | tee "$OUT/gpu-programs.log" | tail -5 || status=1 ;;
    tests)
      python3 -m pytest -q -p no:cacheprovider --durations=8 ${GPU_TESTS:-tests/gpu} ${PYTEST_ARGS:-} 2>&1 | tee -a "$OUT/gpu-tests.log" | tail -25 || status=1 ;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        FUSEC_LINEINFO=1 FUSEC_TEST_SIZES=${SANITIZE_SIZES:-1,33,1000} compute-sanitizer --tool $tool --error-exitcode 1 \
          python3 -m pytest -q -x -p no:cacheprovider tests/gpu -k "${SANITIZE_K:-numpy_against_oracle}" 2>&1 \
          | tee "$OUT/sanitize-$tool.log" | tail -4 || status=1
      done ;;
    run)
      for dtype in float32 float64; do
        python3 -m fusec.cli run scripts/bicgk.script --library fusec/data/blas --size n=16384 --dtype $dtype 2>&1 \
          | tee -a "$OUT/run.log" || status=1
      done ;;
    sweep)
      for spec in ${SWEEP:-bicgk:float32:16384 bicgk:float64:8192}; do
        IFS=: read -r script dtype n <<<"$spec"
        python3 -m bench.sweep "$script" --dtype "$dtype" --size n="$n" --top ${SWEEP_TOP:-24} 2>&1 | tee -a "$OUT/sweep.log" || status=1
      done ;;
    fusion-bench)
      python3 -m bench.fusion --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/fusion-bench.log" || status=1 ;;
    perfdb)  # time the library's routines; the database lands in perfdb/ for the stages after it
      python3 -m fusec.cli perfdb build --library fusec/data/blas 2>&1 | tee "$OUT/perfdb.log" || status=1
      mkdir -p "$OUT/perfdb" && cp fusec/data/perfdb/*.json "$OUT/perfdb/" ;;
    train)  # issue 49: plan times at random sizes, then the fitted correction (kept only if it scores better)
      FUSEC_TRAINING="$OUT/training" python3 -m fusec.cli perfdb measure-plans scripts/*.script \
        --budget ${TRAIN_BUDGET:-240} --seed ${TRAIN_SEED:-0} -q 2>&1 | tee "$OUT/train.log" || status=1
      FUSEC_TRAINING="$OUT/training" python3 -m fusec.cli perfdb fit 2>&1 | tee "$OUT/fit.log" || status=1
      mkdir -p "$OUT/corrections" && cp fusec/data/perfdb/corrections/*.json "$OUT/corrections/" 2>/dev/null ;;
    draw)  # issue 49: first choices against a wide tune at sizes drawn at random
      python3 -m bench.prediction --draw --budget ${DRAW_BUDGET:-300} --out "$OUT/results" ${DRAW_ARGS:-} 2>&1 \
        | tee "$OUT/draw.log" || status=1 ;;
    prediction)
      python3 -m bench.prediction --out "$OUT/results" ${PREDICTION_ARGS:-} 2>&1 | tee "$OUT/prediction.log" || status=1 ;;
    tune)
      for spec in ${TUNE:-gemver:float32:8192:20}; do
        IFS=: read -r script dtype n top <<<"$spec"
        ( TIMEFORMAT="tune wall %R s"; time python3 -m fusec.cli tune scripts/$script.script \
          --library fusec/data/blas --size n=$n --dtype $dtype --top $top ) 2>&1 | tee -a "$OUT/tune.log" || status=1
      done ;;
    horizontal-bench)
      python3 -m experiments.horizontal --out "$OUT/results" ${HORIZONTAL_ARGS:-} 2>&1 | tee "$OUT/horizontal-bench.log" || status=1 ;;
    horizontal-sanitize)
      for tool in racecheck synccheck memcheck; do
        FUSEC_LINEINFO=1 FUSEC_HORIZONTAL_QUICK=1 compute-sanitizer --tool $tool --error-exitcode 1 \
          python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_horizontal.py 2>&1 \
          | tee "$OUT/sanitize-horizontal-$tool.log" | tail -4 || status=1
      done ;;
    striped-sanitize)
      for tool in racecheck synccheck memcheck; do
        FUSEC_LINEINFO=1 FUSEC_STRIPED_QUICK=1 compute-sanitizer --tool $tool --error-exitcode 1 \
          python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_striped.py -k every 2>&1 \
          | tee "$OUT/sanitize-striped-$tool.log" | tail -4 || status=1
      done ;;
    held-sanitize)  # the held plans' quick selection (both options after the barrier among them)
      for tool in memcheck racecheck synccheck; do
        FUSEC_LINEINFO=1 FUSEC_HELD_QUICK=1 compute-sanitizer --tool $tool --error-exitcode 1 \
          python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_held.py -k every_held 2>&1 \
          | tee "$OUT/sanitize-held-$tool.log" | tail -4 || status=1
      done ;;
    peers)  # PEERS: runs of bench.peers, each "NAME:ARGS" with ARGS comma-separated
      for spec in ${PEERS:-h100-peers:}; do
        IFS=: read -r name rest <<<"$spec"
        python3 -m bench.peers --out "$OUT/results" --name "$name" ${rest//,/ } 2>&1 | tee -a "$OUT/peers.log" || status=1
      done ;;
    sweeps)
      python3 -m bench.sweeps --out "$OUT/results" ${SWEEPS_ARGS:-} 2>&1 | tee -a "$OUT/sweeps.log" || status=1 ;;
    graphs)  # host µs per call: warm calls, graph replay, torch.compile reduce-overhead
      python3 -m bench.graphs --out "$OUT/results" ${GRAPHS_ARGS:-} 2>&1 | tee "$OUT/graphs.log" || status=1 ;;
    binding)  # the launch binding A/B (experiments/binding_ab.py)
      python3 -m experiments.binding_ab ${BINDING_ARGS:-} 2>&1 | tee "$OUT/binding.log" || status=1 ;;
    striped-variants)
      python3 -m experiments.striped_variants --out "$OUT/results" 2>&1 | tee "$OUT/striped-variants.log" || status=1 ;;
    cache-hints)
      python3 -m experiments.cache_hints --out "$OUT/results" 2>&1 | tee "$OUT/cache-hints.log" || status=1 ;;
    sanitize-prepared)  # the prepared-call path's launches, on CuPy arrays
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --error-exitcode 1 python3 -m pytest -q -x -p no:cacheprovider \
          tests/gpu/test_programs.py -k "prepared and cupy" 2>&1 | tee "$OUT/sanitize-prepared-$tool.log" | tail -4 || status=1
      done ;;
    retune)
      python3 -m bench.retune --out "$OUT/results" --budget ${RETUNE_BUDGET:-400} ${RETUNE_ARGS:-} 2>&1 \
        | tee -a "$OUT/retune.log" || status=1
      mkdir -p "$OUT/tunings" && cp -r fusec/data/blas/tunings/. "$OUT/tunings/" 2>/dev/null ;;
    save-cache)
      mkdir -p "$OUT/tuning" && cp -r "$FUSEC_CACHE_DIR"/tuning/. "$OUT/tuning/" ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
exit $status
