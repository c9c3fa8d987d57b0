#!/usr/bin/env bash
# Builds commkit's libFuzzer targets (clang, ASan + UBSan, every commkit source instrumented) and runs
# each on its committed seed corpus (tests/fuzz/corpus/<target>/). docs/fuzzing.md has the details.
#   tests/fuzz/run.sh                      smoke run: FUZZ_SECONDS (default 8) per target, as CI does
#   FUZZ_RUNS=1000000 tests/fuzz/run.sh    long run: that many inputs per target
#   tests/fuzz/run.sh nccl_xml_fuzz        only the named targets
# Environment: FUZZ_BUILD_DIR (default build/fuzz), JOBS (default nproc), CXX (default clang++),
# FUZZ_SEED (libFuzzer's -seed; unset: a random seed per run).
# New inputs the fuzzer finds go to $FUZZ_BUILD_DIR/corpus/<target> (kept between runs, not committed);
# a crash leaves its input in $FUZZ_BUILD_DIR/crashes/ and makes the script exit 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${FUZZ_BUILD_DIR:-build/fuzz}
jobs=${JOBS:-$(nproc)}
cxx=${CXX:-clang++}
cc=${CC:-clang}
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found; the fuzz targets need clang (apt install clang)" >&2
  exit 2
fi
targets=(nccl_xml_fuzz hwloc_xml_fuzz nvsmi_fuzz topology_json_fuzz snapshot_fuzz explain_fuzz tcp_store_fuzz)
if (($# > 0)); then targets=("$@"); fi

if command -v ccache >/dev/null 2>&1 && [[ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]]; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi
mkdir -p "$build_dir"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# Only what the targets need: no tools, benches, examples or optional libraries. -O1 with line
# tables keeps the build short and the stack traces readable.
off=()
for d in CUDA NCCL MPI GLOO UCX HWLOC IBVERBS LIBFABRIC ETCD; do off+=("-DCOMMKIT_WITH_${d}=OFF"); done
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" \
  -DCOMMKIT_BUILD_FUZZERS=ON -DCOMMKIT_SANITIZE=ON -DCOMMKIT_BUILD_TOOLS=OFF -DCOMMKIT_BUILD_BENCH=OFF \
  -DCOMMKIT_BUILD_EXAMPLES=OFF -DCOMMKIT_INSTALL=OFF "${off[@]}" >"$build_dir.configure.log" 2>&1 ||
  { cat "$build_dir.configure.log" >&2; exit 2; }
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
seconds=${FUZZ_SECONDS:-8}
limit=(-max_total_time="$seconds")
if [[ -n "${FUZZ_RUNS:-}" ]]; then limit=(-runs="$FUZZ_RUNS"); fi
if [[ -n "${FUZZ_SEED:-}" ]]; then limit+=(-seed="$FUZZ_SEED"); fi
mkdir -p "$build_dir/crashes"
# One target: its exit status is the result; its log holds the stats the table reads.
run_target() {
  local t=$1 seeds=tests/fuzz/corpus/${1%_fuzz} work=$build_dir/corpus/${1%_fuzz} max_len=65536
  mkdir -p "$work"
  # The explainer cuts lines at 4096 bytes (kMaxExplainLineBytes) and keeps state across lines: 8 KiB
  # inputs cover a cut line and several lines around it; longer ones repeat the same per-line work at a
  # few inputs per second under the sanitizers (docs/fuzzing.md).
  if [[ $t == explain_fuzz ]]; then max_len=8192; fi
  # -timeout: one input may take at most 10 s (a hang is a finding); -rss_limit_mb bounds memory.
  "$build_dir/tests/fuzz/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=$max_len -print_final_stats=1 \
    -artifact_prefix="$build_dir/crashes/$t-" "$work" "$seeds" >"$build_dir/$t.log" 2>&1
}
# Each target is one single-threaded process: up to JOBS of them run at once (a time-bounded smoke run
# then takes FUZZ_SECONDS x targets / JOBS), and the table lists them in order once all are done.
declare -A pids=()
running=()
for t in "${targets[@]}"; do
  while ((${#running[@]} >= jobs)); do
    wait -n || true
    still=()
    for r in "${running[@]}"; do if kill -0 "${pids[$r]}" 2>/dev/null; then still+=("$r"); fi; done
    running=("${still[@]}")
  done
  run_target "$t" &
  pids[$t]=$!
  running+=("$t")
done
failed=()
printf '%-20s %10s %8s %8s %s\n' target execs cov ft result
for t in "${targets[@]}"; do
  log=$build_dir/$t.log
  if wait "${pids[$t]}"; then
    result=ok
  else
    result="FAILED (see $log)"
    failed+=("$t")
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-20s %10s %8s %8s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$result"
  grep -h '^tcp_store_fuzz totals' "$log" || true  # requests the store served, besides connections
done
if ((${#failed[@]} > 0)); then
  for t in "${failed[@]}"; do echo "---- $t"; tail -40 "$build_dir/$t.log"; done
  exit 1
fi
