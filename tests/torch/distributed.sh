#!/bin/sh
# distributed.sh MAX_VALUE CHECKPOINT_HEADER OUT_DIR: python/train_distributed.py trains SPEC's
# pointer model on two processes (torch.distributed, gloo) for a few iterations; stformer then
# evaluates the exported checkpoint, predicts for 8 sets as PyTorch did (every log-probability
# within 1e-4 + 1e-4 relative, the same arg-max), and writes its tensors as a header
# (checkpoint_header).
# Exit 77 (skipped) only where python3-torch is not installed.
set -e
here=$(dirname "$0")
mv_bin=$1 header_bin=$2 out=$3
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "python3-torch is not installed: apt-get install python3-torch"
  exit 77
fi
mkdir -p "$out"
run=${STFORMER_RUN:-}
$run "$mv_bin" sets --seed 7 --sets 8 --output "$out/sets.safetensors"
/usr/bin/python3 "$here/../../python/train_distributed.py" --output "$out/pointer.safetensors" --processes 2 --iterations 20 \
  --batch 100 --port $((20000 + $$ % 20000)) --sets "$out/sets.safetensors" --predictions "$out/torch.safetensors"
$run "$mv_bin" eval --checkpoint "$out/pointer.safetensors" --sets 200
$run "$mv_bin" predict --checkpoint "$out/pointer.safetensors" --input "$out/sets.safetensors" --output "$out/stformer.safetensors"
/usr/bin/python3 - "$out" <<'PY'
import json, struct, sys
import numpy as np
def read(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); t = h['log_probs']
    return np.frombuffer(b[8 + n + t['data_offsets'][0]:8 + n + t['data_offsets'][1]], '<f4').reshape(t['shape'])
a, b = read(sys.argv[1] + '/torch.safetensors'), read(sys.argv[1] + '/stformer.safetensors')
off = np.abs(a - b) > 1e-4 + 1e-4 * np.abs(a)
same = (a.argmax(1) == b.argmax(1)).all()
print(f"PyTorch against stformer on {a.shape[0]} sets: largest difference {np.abs(a - b).max():.3g}, "
      f"{int(off.sum())} log-probabilities off, arg-max {'the same' if same else 'DIFFERENT'}")
sys.exit(0 if same and not off.any() else 1)
PY
$run "$header_bin" "$out/pointer.safetensors" "$out/weights.hpp"
grep -qF "inline constexpr stformer::ConstTensorOf<float> tensors[37]" "$out/weights.hpp"
echo "checkpoint_header: $out/weights.hpp, its 37 tensors"
