#!/bin/sh
# parity.sh TEST_BINARY OUT_DIR: writes the PyTorch side (Debian's python3-torch), then runs the
# C++ comparison. Exit 77 (skipped) only where python3-torch is not installed.
set -e
here=$(dirname "$0")
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "python3-torch is not installed: apt-get install python3-torch"
  exit 77
fi
/usr/bin/python3 "$here/make_parity.py" "$2"
STFORMER_PARITY_DIR="$2" exec $STFORMER_RUN "$1"  # STFORMER_RUN: the cross build's wrapper, if any
