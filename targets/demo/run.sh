#!/usr/bin/env bash
# The main demo, from a fresh Debian 12 machine: installs what is missing, builds, then trains
# SPEC's max-value pointer model (300 iterations, seconds) and draws the seed project's figure.
# Outputs go to demo-output/ (checkpoint, max_value.png, max_value.csv).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash targets/install-deps.sh
[ -f build/build.ninja ] || meson setup build -Dsimd=native   # this CPU's widest vectors
ninja -C build targets/max_value/max_value targets/demo/stformer_demo
mkdir -p demo-output
./build/targets/max_value/max_value train --model pointer --seed "${SEED:-0}" --checkpoint demo-output/pointer.safetensors "$@"
./build/targets/max_value/max_value plot --checkpoint demo-output/pointer.safetensors --seed "${SEED:-0}" --output demo-output/max_value.png
