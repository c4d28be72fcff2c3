"""models.py LLAMA2C_DIR OUT_DIR: llama2.c's own PyTorch model (LLAMA2C_DIR/model.py) at the
shapes of stories260K and stories15M, its weights drawn by its own initialisation (seed 1) and its
output layer untied and drawn N(0, 1) (so that greedy decoding of random weights does not stop at
once on the BOS token the tied layer favours), written twice from the same module: by llama2.c's
export.py (legacy_export: OUT_DIR/NAME.bin, what run.c reads) and by stformer_export (OUT_DIR/NAME.hpp
and NAME.safetensors). Prints "model NAME POSITIONS" per model."""
import os
import sys

import torch

llama2c, out = sys.argv[1:]
sys.path.insert(0, llama2c)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from model import ModelArgs, Transformer  # noqa: E402  (llama2.c's)
from export import legacy_export  # noqa: E402  (llama2.c's)
import stformer_export  # noqa: E402

SHAPES = {
    "stories260K": ModelArgs(dim=64, n_layers=5, n_heads=8, n_kv_heads=4, vocab_size=512, multiple_of=4, max_seq_len=512, dropout=0.0),
    "stories15M": ModelArgs(dim=288, n_layers=6, n_heads=6, n_kv_heads=6, vocab_size=32000, multiple_of=32, max_seq_len=256, dropout=0.0),
}
os.makedirs(out, exist_ok=True)
for name, args in SHAPES.items():
    torch.manual_seed(1)
    model = Transformer(args)
    model.output.weight = torch.nn.Parameter(torch.randn_like(model.output.weight))
    model.eval()
    stformer_export.export(model, torch.randint(0, args.vocab_size, (1, 16)), name, out, causal=True)
    legacy_export(model, os.path.join(out, f"{name}.bin"))  # (which negates args.vocab_size for an untied output)
    print("model", name, args.max_seq_len)
