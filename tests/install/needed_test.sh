#!/usr/bin/env bash
# libibverbs, libfabric, libhwloc (topology/src/probers/optional_library.h) and UCX
# (comm/backends/host/src/ucx_api.h) are loaded at run time, so the installed tools start on nodes
# without them. Installs this build into a temporary prefix and
# checks every installed program and commkit library: no NEEDED entry names one of them, no undefined
# symbol calls into one by name, and the whole load closure (ldd) of commkit-topo and gpudoctor is free
# of them and of libgloo.
# Arguments: <build dir>
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null

libs='libibverbs|libfabric|libhwloc|libucp|libucs|libuct|libucm'
bad=0 checked=0
for f in "$work"/prefix/bin/* "$work"/prefix/lib*/libcommkit_*.so* "$work"/prefix/lib*/*/libcommkit_*.so*; do
  [[ -f "$f" && ! -L "$f" ]] || continue
  readelf -h "$f" >/dev/null 2>&1 || continue  # scripts
  checked=$((checked + 1))
  if needed=$(readelf -d "$f" | grep NEEDED | grep -E "$libs"); then
    echo "needed_test: ${f#"$work"/prefix/} links at build time: $needed" >&2
    bad=1
  fi
  if undefined=$(nm -D --undefined-only "$f" | grep -E ' (_?ibv_|fi_|hwloc_|ucp_|ucs_|uct_)'); then
    echo "needed_test: ${f#"$work"/prefix/} calls by name (needs the library at load time):" >&2
    echo "$undefined" >&2
    bad=1
  fi
done
if (( checked < 2 )); then
  echo "needed_test: found only $checked installed ELF files under $work/prefix" >&2
  exit 1
fi
# The node tools load no backend library either (gloo, mpi and nccl are their own libraries; Debian's
# libgloo needs libibverbs), so they start on a node without rdma-core.
for tool in commkit-topo gpudoctor; do
  exe="$work/prefix/bin/$tool"
  [[ -x "$exe" ]] || continue
  if closure=$(ldd "$exe" | grep -E "$libs|libgloo"); then
    echo "needed_test: $tool still loads at start:" >&2
    echo "$closure" >&2
    bad=1
  fi
done
(( bad == 0 )) || exit 1
echo "needed_test: $checked installed programs and libraries name none of libibverbs, libfabric, libhwloc, UCX"
