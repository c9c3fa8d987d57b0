#!/usr/bin/env bash
# Installs this build into a temporary prefix, then configures, builds and runs consumer projects
# against it with find_package(commkit). Also checks that installed public headers include no
# third-party header. Arguments: <build dir> <source dir> <sanitize ON|OFF>
set -euo pipefail
build=$1 src=$2 sanitize=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null

# Public headers must not include third-party headers (nccl.h, mpi.h, cuda*.h, gloo, hwloc, verbs...).
if grep -rEn '#include *[<"](nccl|mpi|cuda|cuda_runtime|gloo/|hwloc|infiniband/|rdma/|ucp/|nlohmann/|CLI/|pugixml|fmt/)' \
    "$work/prefix/include/commkit"; then
  echo "install_test: a public header includes a third-party header (above)" >&2
  exit 1
fi

flags=()
if [[ "$sanitize" == "ON" ]]; then
  flags=(-DCMAKE_CXX_FLAGS="-fsanitize=address,undefined" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined")
fi
gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi

run_consumer() {
  local name=$1 dir=$2; shift 2
  cmake -S "$dir" -B "$work/$name" "${gen[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" "${flags[@]}" >/dev/null
  cmake --build "$work/$name" >/dev/null
  echo "install_test: built $name against the installed package"
  "$@"
}

run_consumer consumer "$src/tests/install/consumer" "$work/consumer/consumer"
# Each examples/<name>/ with a CMakeLists.txt builds against the install too, and runs its check.sh if any.
for ex in "$src"/examples/*/; do
  [[ -f "$ex/CMakeLists.txt" ]] || continue
  name=$(basename "$ex")
  if [[ -x "$ex/check.sh" ]]; then
    run_consumer "$name" "$ex" "$ex/check.sh" "$work/$name" "$work/prefix"
  else
    run_consumer "$name" "$ex" true
  fi
done
echo "install_test: ok"
