#!/usr/bin/env bash
# GPU validation for commkit's NCCL backend, in one command on a machine with NVIDIA GPU(s):
#
#   tools/gpu-check.sh                 configure + build (CUDA/NCCL required), run the gpu tests,
#                                      multi-rank conformance when >= 2 GPUs, overhead benchmark
#   tools/gpu-check.sh --no-build      reuse an existing build dir
#   tools/gpu-check.sh --quick         skip the benchmark
#
# Environment: BUILD_DIR (default build/gpu), JOBS (default nproc), BENCH_ITERS (default 2000),
# OUT_DIR (default $BUILD_DIR/gpu-check: logs and bench JSON), SANITIZE (default OFF).
# Exit status: 0 all passed; 1 a check failed; 2 no GPU/driver here (nothing was validated).
# Every step is bounded (ctest --timeout, `timeout` on the launcher and benchmark).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build/gpu}
out_dir=${OUT_DIR:-$build_dir/gpu-check}
jobs=${JOBS:-$(nproc)}
bench_iters=${BENCH_ITERS:-2000}
do_build=1
do_bench=1
for arg in "$@"; do
  case "$arg" in
    --no-build) do_build=0 ;;
    --quick) do_bench=0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$arg' (see --help)" >&2; exit 1 ;;
  esac
done

step() { printf '\n=== %s ===\n' "$*"; }
failures=()
fail() { echo "gpu-check: FAILED: $*" >&2; failures+=("$*"); }

step "GPU and driver"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: nvidia-smi not found: no NVIDIA driver here; nothing to validate" >&2
  exit 2
fi
if ! timeout 60 nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_mode \
     --format=csv; then
  echo "gpu-check: nvidia-smi failed: the driver is not usable" >&2
  exit 2
fi
ngpus=$(timeout 60 nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "GPUs visible: $ngpus (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})"
if [ "$ngpus" -lt 1 ]; then
  echo "gpu-check: no GPU visible" >&2
  exit 2
fi
if timeout 60 nvidia-smi topo -m >/dev/null 2>&1; then timeout 60 nvidia-smi topo -m || true; fi
mkdir -p "$out_dir"

if [ "$do_build" = 1 ]; then
  step "configure + build (COMMKIT_WITH_CUDA=ON, COMMKIT_WITH_NCCL=ON)"
  generator=()
  if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCOMMKIT_WITH_CUDA=ON -DCOMMKIT_WITH_NCCL=ON -DCOMMKIT_SANITIZE="${SANITIZE:-OFF}" \
    -DCOMMKIT_BUILD_TESTS=ON
  cmake --build "$build_dir" -j "$jobs"
fi
mkdir -p "$out_dir"

step "unit tests of the NCCL backend (error mapping, watchdog, probe)"
ctest --test-dir "$build_dir" -R '^comm_nccl' -L unit --output-on-failure --timeout 120 \
  2>&1 | tee "$out_dir/unit.log" || fail "NCCL unit tests"

step "gpu-labelled tests (conformance at world size 1, streams, multiple communicators, abort)"
# COMMKIT_REQUIRE_GPU=1 turns the tests' GTEST_SKIP (no device) into a failure: on this machine a
# skip would mean the validation did not happen.
COMMKIT_REQUIRE_GPU=1 ctest --test-dir "$build_dir" -L gpu --output-on-failure --timeout 600 \
  2>&1 | tee "$out_dir/gpu-tests.log" || fail "gpu-labelled tests"
# (Skips that remain are legitimate: e.g. the 2-GPU test on a 1-GPU machine.)

gpu_test="$build_dir/tests/comm_nccl_backend_gpu_test"
launcher="$build_dir/bin/commkit-run"
if [ "$ngpus" -ge 2 ]; then
  step "multi-rank NCCL tests: $ngpus ranks, one GPU each (commkit-run)"
  if [ -x "$gpu_test" ] && [ -x "$launcher" ]; then
    COMMKIT_REQUIRE_GPU=1 timeout 900 "$launcher" -n "$ngpus" -- "$gpu_test" --gtest_color=no \
      2>&1 | tee "$out_dir/multirank.log" || fail "multi-rank NCCL tests ($ngpus ranks)"
  else
    fail "missing $gpu_test or $launcher for the multi-rank run"
  fi
else
  echo "only one GPU: multi-rank runs need one GPU per rank (NCCL refuses two ranks on one device)"
  echo "PENDING: multi-rank conformance (run this script on a machine with >= 2 GPUs)" \
    | tee "$out_dir/multirank.log"
fi

if [ "$do_bench" = 1 ]; then
  step "per-call overhead: commkit allreduce vs raw ncclAllReduce (same binary, same communicator setup)"
  bench="$build_dir/bin/commkit-nccl-overhead"
  if [ -x "$bench" ]; then
    timeout 600 "$bench" --iters "$bench_iters" --json "$out_dir/nccl-overhead.json" \
      2>&1 | tee "$out_dir/nccl-overhead.log" || fail "overhead benchmark"
  else
    fail "missing $bench (built only when the NCCL backend is built)"
  fi
fi

step "summary"
echo "logs: $out_dir"
if [ "${#failures[@]}" -gt 0 ]; then
  printf '  FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "  all GPU checks passed on $ngpus GPU(s)"
