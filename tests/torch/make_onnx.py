#!/usr/bin/python3
"""ONNX in (python/stformer_onnx.py): models of tests/torch/traced_models.py in the styles of timm's
ViT, BERT, nanoGPT and llama, torchvision's VisionTransformer and the PyTorch tutorial's language
model, written to ONNX by torch.onnx.export at opsets 13 (LayerNorm and GELU written out as
ReduceMean/Sub/Pow/Sqrt/Div and Erf or Tanh arithmetic) and 17 (LayerNormalization), each
imported, its example output checked here against the PyTorch model's own
(tests/test_torch_onnx.cpp runs the headers against it); and the refusals of bad
files, each message checked; and src/stformer-import from the command line: a graph whose second
input is a key mask (--key-mask, a BERT-style model's attention_mask) or a causal mask
(--causal-mask --sequence-first, the tutorial's), and a graph of two outputs (--output): each
declared as the same model exported from PyTorch directly. The refusals: a truncated and a corrupted file, a tensor whose data is not its
size or of a type not read, absurd dims (of a tensor, or of a constant the graph computes), external data outside the model's folder, an opset outside 13–17, an input of
free dims, an operation not read (named by its node).

usage: /usr/bin/python3 tests/torch/make_onnx.py OUT_DIR
writes OUT_DIR/{onnx_vit13,onnx_bert13,onnx_gpt17,onnx_tvit17,onnx_llama17,onnx_tutorial13}.{onnx,hpp,safetensors,
example.safetensors}
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, here)
import stformer_onnx as so  # noqa: E402
import traced_models as tm  # noqa: E402
from stformer_torch import read_safetensors  # noqa: E402
from torchvision.models.vision_transformer import VisionTransformer  # noqa: E402

torch.set_num_threads(1)
out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def spread(model):
    """Norms and scales away from their initial values, as a trained model's are (each its own:
    torch.onnx.export writes equal tensors once), and no parameter left at zero."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln" in name or name.endswith("gamma")):
                p.uniform_(0.5, 1.5) if name.endswith(("weight", "gamma")) else p.normal_(0, 0.3)
            elif not p.any():  # left at zero (torchvision's head, its class token): an output that cannot differ
                p.normal_(0, 0.5)
    return model.eval()


def write(model, x, path, opset):  # one input
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["x"], output_names=["y"])  # ort_bench's names


torch.manual_seed(3)
tvit = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10)
causal = nn.Transformer.generate_square_subsequent_mask(12)
models = [("onnx_vit13", spread(tm.SmallVit(12)), torch.randn(1, 9, 12), 13, {}),
          ("onnx_bert13", spread(tm.SmallBert()), torch.randint(0, 40, (1, 16)), 13, {}),
          ("onnx_gpt17", spread(tm.SmallGpt()), torch.randint(0, 48, (1, 16)), 17, {}),
          # torchvision's: a Conv patch embedding, nn.MultiheadAttention's own arithmetic (rows sequence-first)
          ("onnx_tvit17", spread(tvit), torch.randn(1, 3, 32, 32), 17, {}),
          # RMSNorm written out: Pow, ReduceMean, Add, Sqrt, Div(1, .), Mul
          ("onnx_llama17", spread(tm.SmallLlama()), torch.randint(0, 64, (1, 12)), 17, {}),
          # the tutorial's: sequence-first ids and the causal mask as the graph's second input
          ("onnx_tutorial13", tm.TutorialLM().eval(), (torch.randint(0, 100, (12, 1)), causal), 13, {"batch_first": False})]
for name, model, x, opset, kw in models:
    path = os.path.join(out, f"{name}.onnx")
    inputs = ["x", "mask"] if isinstance(x, tuple) else ["x"]
    torch.onnx.export(model, x, path, opset_version=opset, input_names=inputs, output_names=["y"])
    so.import_onnx(path, name, out, example=x, **kw)
    args = x if isinstance(x, tuple) else (x,)
    with torch.no_grad():  # the graph as the importer runs it (the example file's output) and PyTorch's model
        want, got = model(*args), so.module(so.load(path), path)(*args)
    err = float((got.reshape(-1) - want.reshape(-1)).abs().max() / want.abs().max())
    assert err < 1e-5, f"{name}: the imported graph's output differs from PyTorch's by {err}"
    print(f"{name}: imported; the graph's output within {err:.2g} of PyTorch's (relative)")


# Refusals: each file refused with its reason, nothing written.
def refused(path, *wanted):
    try:
        so.import_onnx(path, "bad", os.path.join(out, "refused"))
    except so.ImportError_ as e:
        for w in wanted:
            assert w in str(e), f"{w!r} not in:\n{e}"
        assert not os.path.exists(os.path.join(out, "refused", "bad.hpp")), "a refused import wrote its header"
        print("refused:", str(e).splitlines()[0][:160])
        return str(e)
    raise AssertionError(f"imported: {path}")


bad = os.path.join(out, "bad")
shutil.rmtree(bad, ignore_errors=True)
os.makedirs(bad)
good = os.path.join(out, "onnx_gpt17.onnx")
data = open(good, "rb").read()
with open(os.path.join(bad, "truncated.onnx"), "wb") as f:
    f.write(data[: len(data) // 2])
refused(os.path.join(bad, "truncated.onnx"), "not an ONNX model")
with open(os.path.join(bad, "noise.onnx"), "wb") as f:
    f.write(bytes((i * 131 + 7) % 256 for i in range(4096)))
refused(os.path.join(bad, "noise.onnx"), "not an ONNX model")
refused(os.path.join(bad, "missing.onnx"), "no such file")

m = onnx.load(good)
t = next(t for t in m.graph.initializer if t.name == "transformer.wte.weight")
t.raw_data = t.raw_data[:-4]
onnx.save(m, os.path.join(bad, "short.onnx"))
refused(os.path.join(bad, "short.onnx"), "tensor 'transformer.wte.weight' holds 6140 bytes, but its dims [48, 32] need 6144")

m = onnx.load(good)
t = next(t for t in m.graph.initializer if t.name == "transformer.wte.weight")
t.dims[:] = [1 << 20, 1 << 20]
onnx.save(m, os.path.join(bad, "absurd.onnx"))
refused(os.path.join(bad, "absurd.onnx"), "tensor 'transformer.wte.weight' has dims [1048576, 1048576]", "absurd")

m = onnx.load(good)
t = next(t for t in m.graph.initializer if t.name == "transformer.wte.weight")
t.data_type = onnx.TensorProto.DOUBLE  # its 6,144 bytes read as doubles: half a table
onnx.save(m, os.path.join(bad, "double.onnx"))
refused(os.path.join(bad, "double.onnx"), "tensor 'transformer.wte.weight' holds 6144 bytes, but its dims [48, 32] need 12288")
t.data_type = onnx.TensorProto.COMPLEX64
onnx.save(m, os.path.join(bad, "complex.onnx"))
refused(os.path.join(bad, "complex.onnx"), "tensor 'transformer.wte.weight' of ONNX type COMPLEX64, which stformer does not read")

for location in ("../outside.bin", "/etc/passwd"):
    m = onnx.load(good)
    t = next(t for t in m.graph.initializer if t.name == "transformer.wte.weight")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    onnx.save(m, os.path.join(bad, "external.onnx"))
    refused(os.path.join(bad, "external.onnx"), "tensor 'transformer.wte.weight': external data at", "only a file in the model's folder"
            if location.startswith("/") else "outside the model's folder")

write(spread(tm.SmallGpt()), torch.randint(0, 48, (1, 16)), os.path.join(bad, "opset12.onnx"), 12)
refused(os.path.join(bad, "opset12.onnx"), "opset 12: opsets 13 to 17 are read")

torch.onnx.export(spread(tm.SmallGpt()), torch.randint(0, 48, (1, 16)), os.path.join(bad, "dynamic.onnx"), opset_version=17,
                  input_names=["x"], output_names=["y"], dynamic_axes={"x": {1: "tokens"}})
refused(os.path.join(bad, "dynamic.onnx"), "input 'x' of dims", "fixed, positive dims are read")


# a graph made to exhaust memory: a ConstantOfShape of 10^18 elements
shape = onnx.numpy_helper.from_array(np.array([10 ** 9, 10 ** 9], dtype=np.int64), "shape")
io = [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 4, 8]) for n in ("x", "y")]
graph = onnx.helper.make_graph([onnx.helper.make_node("ConstantOfShape", ["shape"], ["big"], name="big"),
                                onnx.helper.make_node("Add", ["x", "big"], ["y"], name="add")], "g", io[:1], io[1:], [shape])
onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), os.path.join(bad, "huge.onnx"))
refused(os.path.join(bad, "huge.onnx"), "node 'big' (ConstantOfShape) of huge.onnx: a ConstantOfShape of 1000000000000000000 elements: absurd")


class Cumulative(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.fc(x), dim=1)


write(Cumulative().eval(), torch.randn(1, 4, 8), os.path.join(bad, "cumsum.onnx"), 17)
refused(os.path.join(bad, "cumsum.onnx"), "node '/CumSum' (CumSum) of cumsum.onnx: CumSum is not an operation stformer_onnx reads")
# From the command line (src/stformer-import), the masks drawn there: each model declared as the
# same blocks as the model exported from PyTorch directly (python/stformer_declaration.py), and
# the key-masked one's example output PyTorch's on the rows that exist.
def cli(*args):
    r = subprocess.run(["sh", os.path.join(here, "..", "..", "src", "stformer-import"), *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def declared(path):
    return read_safetensors(path + ".safetensors")[1]["stformer.declaration"]


def same_blocks(a, b):
    """Whether two files (paths without .safetensors) declare the same blocks, their names aside
    (ONNX holds a position table as a constant of its own name)."""
    unnamed = [re.sub(r'Named<"[^"]*",', "Named<", declared(p)) for p in (a, b)]
    assert unnamed[0] == unnamed[1], f"{a} is declared otherwise than its PyTorch model:\n{unnamed[0]}\n{unnamed[1]}"
    return True


cmd = os.path.join(out, "cli")
shutil.rmtree(cmd, ignore_errors=True)
torch.manual_seed(5)
pbert = spread(tm.PaddedBert())
ids, keys = torch.randint(0, 40, (1, 16)), torch.ones(1, 16, dtype=torch.long)
keys[0, 11:] = 0
torch.onnx.export(pbert, (ids, keys), os.path.join(out, "onnx_pbert13.onnx"), opset_version=13, input_names=["x", "mask"], output_names=["y"])
rc, said = cli(os.path.join(out, "onnx_pbert13.onnx"), "onnx_pbert13", out, "--key-mask")  # beside the others: ONNX Runtime runs it
assert rc == 0, said
so.sx.export(pbert, (ids, keys), "direct_pbert", cmd, key_padding=True)
same_blocks(os.path.join(out, "onnx_pbert13"), os.path.join(cmd, "direct_pbert"))
example = read_safetensors(os.path.join(out, "onnx_pbert13.example.safetensors"))[0]
with torch.no_grad():
    want = pbert(example["input"].long(), example["keys"].long())
assert example["keys"].min() == 0, "the drawn key mask pads no row"
err = float((example["output"] - want).abs().max() / want.abs().max())
assert err < 1e-5, f"pbert from the command line: its example's output differs from PyTorch's by {err}"
assert "--keys" in open(os.path.join(out, "onnx_pbert13.hpp")).read()
print(f"stformer-import --key-mask: the BERT-style graph with its attention_mask, declared as PyTorch's model, within {err:.2g}")

tutorial = tm.TutorialLM().eval()
causal = nn.Transformer.generate_square_subsequent_mask(12)
x = torch.randint(0, 100, (12, 1))
torch.onnx.export(tutorial, (x, causal), os.path.join(out, "tutorial13.onnx"), opset_version=13, input_names=["x", "mask"], output_names=["y"])
rc, said = cli(os.path.join(out, "tutorial13.onnx"), "tutorial", cmd, "--causal-mask", "--sequence-first")
assert rc == 0, said
so.sx.export(tutorial, (x, causal), "direct_tutorial", cmd, batch_first=False)
tut = os.path.join(cmd, "tutorial")
assert same_blocks(tut, os.path.join(cmd, "direct_tutorial")) and declared(tut).startswith("Causal<")
print("stformer-import --causal-mask --sequence-first: the tutorial's graph, declared causal as PyTorch's model")


class TwoOutputs(nn.Module):  # the logits and a running sum of them (an operation not read)
    def __init__(self):
        super().__init__()
        self.gpt = spread(tm.SmallGpt())

    def forward(self, idx):
        y = self.gpt(idx)
        return y, y.cumsum(-1)


two = TwoOutputs().eval()
ids = torch.randint(0, 48, (1, 16))
torch.onnx.export(two, ids, os.path.join(out, "two17.onnx"), opset_version=17, input_names=["x"], output_names=["y", "z"])
rc, said = cli(os.path.join(out, "two17.onnx"), "two", cmd)
assert rc == 1 and "2 outputs (y, z): one is read" in said and "--output y" in said, said
rc, said = cli(os.path.join(out, "two17.onnx"), "two", cmd, "--output", "w")
assert rc == 1 and "no output 'w': its outputs are y, z" in said, said
rc, said = cli(os.path.join(out, "two17.onnx"), "two", cmd, "--output", "z")
assert rc == 1 and "node '/CumSum' (CumSum)" in said, said
assert not os.path.exists(os.path.join(cmd, "two.hpp")), "a refused import wrote its header"
rc, said = cli(os.path.join(out, "two17.onnx"), "two", cmd, "--output", "y")
assert rc == 0, said
so.sx.export(two.gpt, ids, "direct_gpt", cmd)
assert same_blocks(os.path.join(cmd, "two"), os.path.join(cmd, "direct_gpt"))
rc, said = cli(os.path.join(out, "tutorial13.onnx"), "tutorial", cmd)
assert rc == 1 and "--causal-mask or --key-mask" in said, said
rc, said = cli(os.path.join(out, "onnx_pbert13.onnx"), "refused", cmd, "--causal-mask")
assert rc == 1 and "is not a causal mask (N, N)" in said, said
print("stformer-import --output: a graph of two outputs, each refusal named; the chosen one declared as PyTorch's model")
print("ONNX in: every model imported within 1e-5 of PyTorch; every bad file refused")
