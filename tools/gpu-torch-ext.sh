#!/usr/bin/env bash
# Compiles commkit's torch.distributed backend (commkit._C) on a GPU machine, against that machine's
# Python and torch, from a bundle made by tools/gpu-bundle (packed there as torch/build.sh).
#
#   torch/build.sh [PYTHON]     PYTHON defaults to python3; the package lands in torch/commkit/
#
# Needs a C++20 compiler (CXX, default c++), the Python headers (Python.h) and torch with its headers.
# The commkit libraries come from the bundle's lib/ (found at run time through LD_LIBRARY_PATH).
# Exit: 0 built, 1 the compile or link failed, 3 something it needs is missing here (said why).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$(cd "$here/../lib" && pwd)
py=${1:-python3}
cxx=${CXX:-c++}

[ -f "$here/exports.map" ] || { echo "gpu-torch-ext: $here/exports.map missing (repack with tools/gpu-bundle)" >&2; exit 1; }
command -v "$py" >/dev/null 2>&1 || { echo "gpu-torch-ext: $py not found" >&2; exit 3; }
command -v "$cxx" >/dev/null 2>&1 || { echo "gpu-torch-ext: no C++ compiler ($cxx); set CXX" >&2; exit 3; }
info=$("$py" - <<'PY'
import sysconfig, torch, torch.utils.cpp_extension as c
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(";".join(c.include_paths()))
print(";".join(c.library_paths()))
PY
) || { echo "gpu-torch-ext: $py cannot import torch" >&2; exit 3; }
{ read -r py_inc; read -r suffix; read -r abi; read -r torch_incs; read -r torch_libs; } <<< "$info"
[ -f "$py_inc/Python.h" ] || { echo "gpu-torch-ext: $py_inc/Python.h missing (install the Python headers)" >&2; exit 3; }

flags=(-std=c++20 -O2 -fPIC -DNDEBUG -fvisibility=hidden -fvisibility-inlines-hidden -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C
       -D_GLIBCXX_USE_CXX11_ABI="$abi" -DCOMMKIT_NCCL_HAS_BACKEND=1 -DCOMMKIT_TORCH_WITH_NCCL=1
       -I"$here/include" -isystem "$py_inc")
IFS=';' read -r -a incs <<< "$torch_incs"
for d in "${incs[@]}"; do flags+=(-isystem "$d"); done
# The module exports only PyInit__C (hidden visibility plus python/exports.map, the version script the
# CMake build uses too: namespace std keeps default visibility, so only the script keeps its
# instantiations local). Otherwise the C++ library
# templates this compiler instantiates in _C would be exported and interpose on the commkit
# libraries' own, built with another GCC (docs/gpu-validation.md).
objs=()
pids=()
mkdir -p "$here/obj"
for src in "$here"/src/*.cc; do
  obj="$here/obj/$(basename "$src" .cc).o"
  objs+=("$obj")
  "$cxx" "${flags[@]}" -c "$src" -o "$obj" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ "$rc" = 0 ] || { echo "gpu-torch-ext: compile failed" >&2; exit 1; }
IFS=';' read -r -a tlibs <<< "$torch_libs"
tdir=${tlibs[0]}
"$cxx" -shared -Wl,--version-script="$here/exports.map" -o "$here/commkit/_C$suffix" "${objs[@]}" \
  "$lib"/libcommkit_comm_nccl.so.* "$lib"/libcommkit_comm.so.* "$lib"/libcommkit_topology.so.* "$lib"/libcommkit_common.so.* \
  -L"$tdir" -ltorch -ltorch_cpu -lc10 -ltorch_python -Wl,-rpath,"$tdir" \
  || { echo "gpu-torch-ext: link failed" >&2; exit 1; }
echo "gpu-torch-ext: built $here/commkit/_C$suffix"
