#!/usr/bin/env bash
# Used by tests/install/install_test.sh: runs the example built against the install with 2 ranks.
# Arguments: <example build dir> <install prefix>
set -euo pipefail
build=$1 prefix=$2
"$prefix/bin/commkit-run" -n 2 --timeout 120 -- "$build/ddp_allreduce" --steps 2 --backend gloo
