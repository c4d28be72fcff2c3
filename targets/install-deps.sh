#!/usr/bin/env bash
# Installs what stformer needs on Debian 12, from Debian's packages only, when it is missing.
# Usage: bash targets/install-deps.sh [EXTRA-PACKAGE ...]
set -euo pipefail
packages=(g++ meson ninja-build pkg-config xtensor-dev libxsimd-dev xtl-dev doctest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev gnuplot-nox "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
