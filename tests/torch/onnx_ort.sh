#!/usr/bin/env bash
# onnx_ort.sh ORT_INCLUDE_DIR MODELS_DIR OUT_DIR: the ONNX files tests/torch/make_onnx.py wrote
# (MODELS_DIR: the build's tests/ folder, where torch_onnx ran them through stformer), run by ONNX
# Runtime 1.30 (onnxruntime-node's library from npm, bench/onnxruntime/ort_lib.sh; ORT_LIB to give
# one) on their example inputs: each output within 1e-5 of the graph's output (relative to its
# largest entry), which stformer's headers give within 4.2e-7 (test_torch_onnx). A graph's second
# input, a mask, is fed as the model was exported with it: the causal triangle (additive, or bool
# True above the diagonal), or the example's key mask (1 for a token, or bool True for padding).
# Prints ORT's version and each model's difference.
# ORT_INCLUDE_DIR: a folder with onnxruntime_c_api.h. OUT_DIR: outside this checkout.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: onnx_ort.sh ORT_INCLUDE_DIR MODELS_DIR OUT_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
bench=$here/../../bench/onnxruntime
[ -f "$1/onnxruntime_c_api.h" ] || { echo "onnx_ort.sh: $1: no onnxruntime_c_api.h there" >&2; exit 2; }
inc=$(cd "$1" && pwd) models=$(cd "$2" && pwd)
mkdir -p "$3"
out=$(cd "$3" && pwd)
. "$bench/ort_lib.sh"
ort_lib "$out" "${ORT_VERSION:-1.30.0}"
g++ -std=c++17 -O1 -I"$inc" "$bench/ort_bench.cpp" -o "$out/ort_bench" "$LIB" -Wl,-rpath,"$(dirname "$LIB")"
# the manifest: each model's example input and the graph's output, as raw little-endian tensors
/usr/bin/python3 - "$models" "$out" "$here/../../python" <<'PY'
import glob, os, sys
import numpy as np
import onnx
models, out, python = sys.argv[1:]
sys.path.insert(0, python)
from stformer_torch import read_safetensors  # noqa: E402

def tensors(path):  # a safetensors file's tensors as numpy arrays
    return {k: v.numpy() for k, v in read_safetensors(path)[0].items()}

lines = []
for onnx_path in sorted(glob.glob(os.path.join(models, "onnx_*.onnx"))):
    name = os.path.basename(onnx_path)[:-5]
    example = os.path.join(models, f"{name}.example.safetensors")
    if not os.path.exists(example):
        continue
    t = tensors(example)
    graph = onnx.load(onnx_path, load_external_data=False).graph
    dims = lambda v: [d.dim_value or -1 for d in v.type.tensor_type.shape.dim]  # noqa: E731  (-1: a dim ONNX leaves free)
    # the example in stformer's layout, the same bytes as the graph's (an image's C*H rows of W pixels: (B, C, H, W))
    ids = t["input"].dtype != np.float32
    x = t["input"].astype(np.int64 if ids else np.float32).reshape(dims(graph.input[0]))
    y = t["output"].reshape(dims(graph.output[0]))
    x.tofile(os.path.join(out, f"{name}.input.bin"))
    y.astype(np.float32).tofile(os.path.join(out, f"{name}.expected.bin"))
    fields = [name, onnx_path, "i64" if ids else "f32", ",".join(map(str, x.shape)), os.path.join(out, f"{name}.input.bin"),
              ",".join(map(str, y.shape)), os.path.join(out, f"{name}.expected.bin")]
    inits = {i.name for i in graph.initializer}
    extra = [i for i in graph.input if i.name not in inits][1:]
    if extra:  # the mask: the graph's second input
        kind = extra[0].type.tensor_type.elem_type
        shape = dims(extra[0])
        if "keys" in t:  # the example's key mask, 1 for a token
            mask = t["keys"].reshape(shape) != 0
            mask = ~mask if kind == onnx.TensorProto.BOOL else mask
        else:  # a causal model's triangle above the diagonal
            mask = np.triu(np.ones(shape, dtype=bool), 1)
            mask = mask if kind == onnx.TensorProto.BOOL else np.where(mask, -np.inf, 0)
        code = {onnx.TensorProto.BOOL: ("b8", np.uint8), onnx.TensorProto.INT64: ("i64", np.int64), onnx.TensorProto.FLOAT: ("f32", np.float32)}
        tag, dtype = code[kind]
        mask.astype(dtype).tofile(os.path.join(out, f"{name}.mask.bin"))
        fields += [tag, ",".join(map(str, shape)), os.path.join(out, f"{name}.mask.bin")]
    lines.append("\t".join(fields))
open(os.path.join(out, "manifest.tsv"), "w").write("\n".join(lines) + "\n")
print(f"{len(lines)} ONNX models for ONNX Runtime")
PY
"$out/ort_bench" "$out/manifest.tsv" 1 1 0.001 > "$out/ort.txt"
awk -F'\t' '
  $1 == "VERSION" { print "ONNX Runtime " $2; next }
  $1 == "RESULT" { rel = $3 / ($4 > 1e-30 ? $4 : 1e-30); printf "%s: ONNX Runtime against the graph stformer runs: %.3g (relative)\n", $2, rel
                   n++; if (rel > 1e-5) bad++ }
  END { if (n == 0) { print "no model run"; exit 1 } if (bad) { print bad " of " n " models differ"; exit 1 } print n " models: ONNX Runtime agrees" }
' "$out/ort.txt"
