#!/usr/bin/env bash
# GPU validation of commkit's NCCL backend and commkit-bench on device memory.
#
#   tools/gpu-check.sh --bundle DIR --out OUT   run a bundle made by tools/gpu-bundle (nothing is built
#                                               or installed: for GPU machines without a toolchain's
#                                               dependencies); logs and summary.json go to OUT
#   tools/gpu-check.sh [--out OUT]              configure + build here (CUDA/NCCL required), then the same
#   tools/gpu-check.sh --no-build [--out OUT]   reuse BUILD_DIR (default build/gpu)
#   --quick                                     skip the bandwidth sweeps (keep the correctness runs)
#
# libnccl.so.2 is found, in order, in NCCL_LIB_DIR, LD_LIBRARY_PATH, the nvidia-nccl-cu13 Python
# package (nvidia/nccl/lib), ldconfig's cache and /usr/local/cuda/lib{,64}.
# Every step is bounded by `timeout`. Steps that need a GPU run anyway without one and must then skip
# cleanly with the reason (a crash or a wrong exit code is a failure).
# Exit status: 0 every step passed on a GPU; 1 a step failed; 2 no usable GPU here (the CPU steps
# passed, the GPU steps skipped: nothing GPU-side was validated).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

bundle=""
out=""
build_dir=${BUILD_DIR:-build/gpu}
do_build=1
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=${2:?--bundle needs a directory}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
done

if [ -n "$bundle" ]; then
  bundle=$(cd "$bundle" 2>/dev/null && pwd) || { echo "gpu-check: --bundle: no such directory" >&2; exit 1; }
  [ -x "$bundle/bin/commkit-bench" ] || { echo "gpu-check: $bundle has no bin/commkit-bench (make it with tools/gpu-bundle)" >&2; exit 1; }
  bin="$bundle/bin"
  tests="$bundle/bin"
  out=${out:-$bundle/../gpu-check-out}
else
  cd "$repo" || exit 1
  if [ "$do_build" = 1 ]; then
    generator=()
    command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
    cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCOMMKIT_WITH_CUDA=ON \
      -DCOMMKIT_WITH_NCCL=ON -DCOMMKIT_SANITIZE="${SANITIZE:-OFF}" -DCOMMKIT_BUILD_TESTS=ON || exit 1
    cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" || exit 1
  fi
  bin="$repo/$build_dir/bin"
  tests="$repo/$build_dir/tests"
  out=${out:-$build_dir/gpu-check}
fi
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
steps="$out/steps.tsv"
: > "$steps"

# --- libnccl ------------------------------------------------------------------------------------
find_nccl() {
  local d
  if [ -n "${NCCL_LIB_DIR:-}" ] && [ -e "$NCCL_LIB_DIR/libnccl.so.2" ]; then echo "$NCCL_LIB_DIR NCCL_LIB_DIR"; return; fi
  IFS=: read -r -a dirs <<< "${LD_LIBRARY_PATH:-}"
  for d in "${dirs[@]}"; do
    [ -n "$d" ] && [ -e "$d/libnccl.so.2" ] && { echo "$d LD_LIBRARY_PATH"; return; }
  done
  for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    d=$("$py" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null) || continue
    [ -e "$d/libnccl.so.2" ] && { echo "$d python:nvidia-nccl"; return; }
  done
  d=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  [ -n "$d" ] && { echo "$(dirname "$d") ldconfig"; return; }
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [ -e "$d/libnccl.so.2" ] && { echo "$d /usr/local/cuda"; return; }
  done
}
read -r nccl_dir nccl_from <<< "$(find_nccl)"
# The bundle's C++ runtime (lib/cxx) needs the glibc it was built with; the GPU machine's own libstdc++
# is used instead whenever it has the newest GLIBCXX version the bundle asks for.
cxx_from=""
if [ -n "$bundle" ] && [ -d "$bundle/lib/cxx" ]; then
  need=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("requires_glibcxx",""))' "$bundle/manifest.json" 2>/dev/null)
  sys_cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 /{print $NF; exit}')
  if [ -n "$need" ] && [ -n "$sys_cxx" ] && grep -q -a "$need" "$sys_cxx" 2>/dev/null; then
    cxx_from="this machine ($sys_cxx has $need)"
  else
    cxx_from="the bundle (lib/cxx; this machine's libstdc++ lacks ${need:-the needed version})"
    bundle_libs="$bundle/lib:$bundle/lib/cxx"
  fi
fi
if [ -n "$bundle" ]; then
  export LD_LIBRARY_PATH="${bundle_libs:-$bundle/lib}${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "C++ runtime: from $cxx_from"
elif [ -n "${nccl_dir:-}" ]; then
  export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export COMMKIT_BIN_DIR="$bin" NO_COLOR=1
echo "libnccl.so.2: ${nccl_dir:-not found} (${nccl_from:-searched NCCL_LIB_DIR, LD_LIBRARY_PATH, the nvidia-nccl Python package, ldconfig, /usr/local/cuda})"

# --- GPU ----------------------------------------------------------------------------------------
ngpus=0
gpu_reason=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  gpu_reason="nvidia-smi not found: no NVIDIA driver on this machine"
elif ! timeout 60 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$out/nvidia-smi.log" 2>&1; then
  gpu_reason="nvidia-smi failed: the driver is not usable (see nvidia-smi.log)"
else
  ngpus=$(timeout 60 nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  [ "$ngpus" -ge 1 ] || gpu_reason="nvidia-smi lists no GPU (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})"
  timeout 60 nvidia-smi topo -m >> "$out/nvidia-smi.log" 2>&1 || true
fi
[ -z "$nccl_dir" ] && [ "$ngpus" -ge 1 ] && echo "gpu-check: warning: libnccl.so.2 not found; the NCCL steps will fail to load" >&2
echo "GPUs: $ngpus${gpu_reason:+ ($gpu_reason)}"

# --- steps ----------------------------------------------------------------------------------------
# record NAME STATUS SECONDS LOG REASON
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5//$'\t'/ }" >> "$steps"; echo "  -> $2${5:+: $5}"; }

# run_step NAME NEEDS_GPU TIMEOUT CMD...: exit 0 passes; without a GPU, a GPU step passes as "skip"
# when it exited 0 having skipped (gtest) or 4 (commkit-bench: backend unavailable here).
run_step() {
  local name=$1 needs_gpu=$2 limit=$3
  shift 3
  local log="$out/$name.log" start end rc reason
  printf '\n=== %s ===\n+ %s\n' "$name" "$*"
  if [ ! -x "$1" ]; then
    record "$name" fail 0 "$log" "missing $1"
    return
  fi
  start=$(date +%s)
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  end=$(date +%s)
  tail -n 15 "$log"
  if [ "$rc" = 124 ]; then
    record "$name" fail $((end - start)) "$log" "timed out after ${limit}s"
  elif [ "$needs_gpu" = 1 ] && [ "$ngpus" -lt 1 ]; then
    reason=$(grep -m1 -o -E 'no usable GPU: .*|cannot run on this machine: .*|needs device memory: .*' "$log" | cut -c1-300)
    # 77: a test binary whose tests all skipped (tests/support/test_main.cc); 4: commkit-bench's
    # "backend cannot run here".
    if { { [ "$rc" = 0 ] || [ "$rc" = 77 ]; } && grep -q -E '\[  SKIPPED \]|^# .*SKIP' "$log"; } || [ "$rc" = 4 ]; then
      record "$name" skip $((end - start)) "$log" "${reason:-$gpu_reason}"
    else
      record "$name" fail $((end - start)) "$log" "exit $rc without a GPU (expected a clean skip)"
    fi
  elif [ "$rc" = 77 ]; then
    record "$name" fail $((end - start)) "$log" "every test skipped on a machine with a GPU"
  elif [ "$rc" = 0 ]; then
    record "$name" pass $((end - start)) "$log" ""
  else
    record "$name" fail $((end - start)) "$log" "exit $rc"
  fi
}

# On a GPU machine a gtest skip means the validation did not happen: make it a failure.
[ "$ngpus" -ge 1 ] && export COMMKIT_REQUIRE_GPU=1

run_step nccl-unit 0 300 "$tests/comm_nccl_unit_test" --gtest_color=no
run_step nccl-engine-gpu 1 600 "$tests/comm_nccl_engine_gpu_test" --gtest_color=no
run_step nccl-backend-gpu 1 600 "$tests/comm_nccl_backend_gpu_test" --gtest_color=no
if [ "$ngpus" -ge 2 ]; then
  run_step nccl-backend-multirank 1 900 "$bin/commkit-run" -n "$ngpus" -- "$tests/comm_nccl_backend_gpu_test" --gtest_color=no
else
  printf '\n=== nccl-backend-multirank ===\n'
  record nccl-backend-multirank skip 0 "" "needs >= 2 GPUs (one per rank; NCCL refuses two ranks on one GPU); this machine has $ngpus"
fi

# gpudoctor's node checks: 0 passed, 1 warnings, 2 findings about this machine (reported, not a
# failure of commkit); anything else is.
printf '\n=== gpudoctor ===\n'
start=$(date +%s)
timeout 300 "$bin/gpudoctor" --json > "$out/gpudoctor.json" 2> "$out/gpudoctor.log"
rc=$?
case "$rc" in
  0|1|2) record gpudoctor pass $(( $(date +%s) - start )) "$out/gpudoctor.json" "gpudoctor exit $rc (0 healthy, 1 warnings, 2 findings)" ;;
  *) record gpudoctor fail $(( $(date +%s) - start )) "$out/gpudoctor.log" "gpudoctor exit $rc" ;;
esac

# commkit-topo on the real machine: what the probes see, and the NCCL XML commkit would hand NCCL
# (compare with NCCL's own view, dumped by the bench-nccl-allreduce step: nccl-topo-dump.xml).
if [ -x "$bin/commkit-topo" ]; then
  run_step topology 0 120 "$bin/commkit-topo" show
  "$bin/commkit-topo" export --format nccl-xml -o "$out/commkit-topo.xml" > /dev/null 2>&1 || true
fi

# The torch.distributed backend: compiled here against this machine's Python and torch (torch/build.sh;
# exit 3 = a compiler, Python.h or torch is missing here), then CUDA tensors at world size 1.
if [ -n "$bundle" ] && [ -x "$bundle/torch/build.sh" ]; then
  printf '\n=== torch-build ===\n'
  start=$(date +%s)
  timeout 600 "$bundle/torch/build.sh" > "$out/torch-build.log" 2>&1
  rc=$?
  tail -n 5 "$out/torch-build.log"
  case "$rc" in
    0) record torch-build pass $(( $(date +%s) - start )) "$out/torch-build.log" "" ;;
    3) record torch-build skip $(( $(date +%s) - start )) "$out/torch-build.log" "$(tail -n 1 "$out/torch-build.log")" ;;
    *) record torch-build fail $(( $(date +%s) - start )) "$out/torch-build.log" "exit $rc" ;;
  esac
  if ! grep -q $'^torch-build\tpass' "$steps"; then
    printf '\n=== torch-cuda ===\n'
    record torch-cuda skip 0 "" "the torch backend was not built here (see torch-build)"
  elif [ "$ngpus" -lt 1 ]; then
    printf '\n=== torch-cuda ===\n'
    record torch-cuda skip 0 "" "needs a GPU: $gpu_reason"
  else
    rm -f "$out/torch-init"
    run_step torch-cuda 1 300 /usr/bin/env PYTHONPATH="$bundle/torch" COMMKIT_TEST_INIT="file://$out/torch-init" \
      python3 "$bundle/torch/_cuda_worker.py"
    if [ "$quick" = 0 ]; then
      run_step torch-cuda-allreduce 1 300 /usr/bin/env PYTHONPATH="$bundle/torch" \
        python3 "$bundle/torch/cuda_allreduce.py" --json "$out/torch-cuda-allreduce.json"
    fi
  fi
fi

# commkit-bench: the host path proves the bundle's binaries and libraries run at all; the device
# path checks every collective on GPU buffers (#wrong must be 0), then sweeps all-reduce against raw
# NCCL. One rank per GPU, as threads of one process (-g).
bench="$bin/commkit-bench"
run_step bench-host 0 300 "$bench" allreduce -B host --local 2 -b 8 -e 64K -f 8 -w 1 -n 3 --no-progress --predict off
ranks=$(( ngpus >= 1 ? ngpus : 1 ))
for coll in allreduce allgather reduce_scatter broadcast reduce alltoall sendrecv; do
  if [ "$coll" = sendrecv ] && [ "$ranks" -lt 2 ]; then
    printf '\n=== bench-nccl-sendrecv ===\n'
    record bench-nccl-sendrecv skip 0 "" "a ring of sends needs >= 2 GPUs; this machine has $ngpus"
    continue
  fi
  dump=()
  [ "$coll" = allreduce ] && dump=(/usr/bin/env NCCL_TOPO_DUMP_FILE="$out/nccl-topo-dump.xml")
  run_step "bench-nccl-$coll" 1 600 "${dump[@]}" "$bench" "$coll" -B nccl --raw nccl --local "$ranks" -b 8 -e 8M -f 32 -w 2 -n 5 \
    --no-progress --predict off --format json --output "$out/bench-nccl-$coll.jsonl"
done
if [ "$quick" = 0 ]; then
  run_step bench-nccl-allreduce-sweep 1 600 "$bench" allreduce -B nccl --raw nccl --local "$ranks" -b 8 -e 256M -f 2 \
    --no-progress --predict off --output "$out/bench-nccl-allreduce-sweep.txt"
  run_step bench-nccl-allreduce-graph 1 600 "$bench" allreduce -B nccl --raw nccl --local "$ranks" -b 8 -e 1M -f 16 -G 10 \
    --no-progress --predict off --output "$out/bench-nccl-allreduce-graph.txt"
  run_step bench-nccl-allreduce-blocking 1 600 "$bench" allreduce -B nccl --raw nccl --local "$ranks" -b 8 -e 1M -f 16 -z 1 \
    --no-progress --predict off --output "$out/bench-nccl-allreduce-blocking.txt"
fi

# --- summary ------------------------------------------------------------------------------------
manifest=""
[ -n "$bundle" ] && manifest="$bundle/manifest.json"
python3 - "$steps" "$out/summary.json" "$ngpus" "$gpu_reason" "${nccl_dir:-}" "${nccl_from:-}" "$manifest" <<'PY'
import json, os, platform, sys
steps_file, summary, ngpus, gpu_reason, nccl_dir, nccl_from, manifest = sys.argv[1:8]
steps = []
for line in open(steps_file):
    name, status, seconds, log, reason = line.rstrip("\n").split("\t")
    steps.append({"name": name, "status": status, "seconds": int(seconds), "log": os.path.basename(log) if log else "",
                  "reason": reason})
failed = [s["name"] for s in steps if s["status"] == "fail"]
ngpus = int(ngpus)
verdict = "fail" if failed else ("pass" if ngpus >= 1 else "no-gpu")
doc = {"schema": "commkit.gpu-check/1", "host": platform.node(), "gpus": ngpus, "gpu_reason": gpu_reason,
       "libnccl_dir": nccl_dir, "libnccl_from": nccl_from, "verdict": verdict, "failed": failed, "steps": steps}
if manifest and os.path.exists(manifest):
    m = json.load(open(manifest))
    doc["bundle"] = {"commit": m.get("commit"), "dirty": m.get("dirty"), "built_with_glibc": m.get("built_with_glibc")}
json.dump(doc, open(summary, "w"), indent=1)
print(f"\nsummary: {summary}: {verdict}; " + ", ".join(f"{s['name']}={s['status']}" for s in steps))
PY
if grep -q $'\tfail\t' "$steps"; then exit 1; fi
[ "$ngpus" -ge 1 ] || exit 2
exit 0
