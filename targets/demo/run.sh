#!/usr/bin/env bash
# The main demo, from a fresh Debian 12 machine: installs what is missing, builds, runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash targets/install-deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build targets/demo/stformer_demo
./build/targets/demo/stformer_demo "$@"
