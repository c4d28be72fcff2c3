#!/usr/bin/env bash
# The side-by-side comparison with PyTorch, from a fresh Debian 12 machine: installs what is
# missing (python3-torch, and libopenblas0-pthread so that PyTorch is not on the reference
# BLAS), builds build-bench for this CPU (-Dsimd=native), and runs bench/compare_torch.py.
# Arguments go to compare_torch.py (--rounds N, --repetitions N, --only SUBSTRING). Takes ~10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash targets/install-deps.sh python3-torch libopenblas0-pthread
[ -f build-bench/build.ninja ] || meson setup build-bench -Dsimd=native
ninja -C build-bench bench/bench_stformer
STFORMER_BUILD=build-bench /usr/bin/python3 bench/compare_torch.py "$@"
