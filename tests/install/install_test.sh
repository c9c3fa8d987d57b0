#!/usr/bin/env bash
# Installs this build into a temporary prefix, then configures, builds and runs consumer projects
# against it with find_package(commkit), and the first one again with pkg-config (commkit.pc). Also checks that installed public headers include no
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

# The same consumer built the pkg-config way, from the .pc files installed next to the CMake package.
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "install_test: pkg-config not found (apt install pkg-config); cannot check the installed commkit.pc" >&2
  exit 1
fi
pc=$(find "$work/prefix" -name commkit.pc -path '*/pkgconfig/*' | head -1)
if [[ -z "$pc" ]]; then
  echo "install_test: no commkit.pc installed under $work/prefix" >&2
  exit 1
fi
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
for f in "$(dirname "$pc")"/*.pc; do  # every installed module resolves, private requirements included
  pkg-config --exists --print-errors "$(basename "$f" .pc)"
  pkg-config --exists --print-errors --static "$(basename "$f" .pc)"
done
libdir=$(pkg-config --variable=libdir commkit-common)
san=()
if [[ "$sanitize" == "ON" ]]; then san=(-fsanitize=address,undefined); fi
# shellcheck disable=SC2046  # pkg-config's output is a list of flags
c++ -std=c++20 "${san[@]}" -o "$work/pkgconfig-consumer" "$src/tests/install/consumer/main.cc" \
  $(pkg-config --cflags --libs commkit) -Wl,-rpath,"$libdir"
echo "install_test: built consumer with pkg-config --cflags --libs commkit ($(pkg-config --modversion commkit))"
"$work/pkgconfig-consumer"
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
