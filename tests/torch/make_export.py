#!/usr/bin/python3
"""The exporter's side of its round trip (tests/test_torch_export.cpp): seven models built from
PyTorch's own modules, exported by python/stformer_export.py with an example input and PyTorch's
output for it; and its refusals, checked here.

usage: /usr/bin/python3 tests/torch/make_export.py OUT_DIR
writes OUT_DIR/{classifier,tagger,tokens,listed,encoder,decoder,decoder_layer}.{hpp,safetensors,example.safetensors}, and
OUT_DIR/trained.{hpp,safetensors}: the issue's classifier trained by PyTorch on a small task
(which of 5 prototypes was planted among 32 rows of noise), with OUT_DIR/trained.data.safetensors:
`calibration` inputs, `test` inputs, their `labels` and PyTorch's `predictions` and `logits`.
"""
import functools
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import stformer_export as sx  # noqa: E402
import refusals  # noqa: E402
from stformer_torch import save_safetensors  # noqa: E402

torch.manual_seed(5)
torch.set_num_threads(1)
out = sys.argv[1]


def spread_norms(model):
    """LayerNorm weights and biases away from ones and zeros, as a trained model's are."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.3)
            if isinstance(m, sx.ClassToken):
                m.cls_token.normal_()
    return model


def layer(d, h, f, **kw):
    return nn.TransformerEncoderLayer(d, h, f, batch_first=True, **kw)


# The classifier: 2 post-norm GELU layers, D 32, 4 heads, F 64, 32 tokens.
classifier = nn.Sequential(nn.Linear(8, 32), sx.PositionEmbedding(32, 32),
                           nn.TransformerEncoder(layer(32, 4, 64, activation="gelu"), 2), sx.MeanPool(), nn.Linear(32, 5))
# A class token read back by FirstToken; a pre-norm layer in a nested Sequential beside a
# Dropout; an encoder of one SiLU layer with its final norm; a head without bias.
tagger = nn.Sequential(nn.Linear(6, 16), sx.ClassToken(16), nn.Sequential(layer(16, 2, 32, norm_first=True), nn.Dropout(0.2)),
                       nn.TransformerEncoder(layer(16, 2, 32, activation=nn.SiLU()), 1, norm=nn.LayerNorm(16)),
                       sx.FirstToken(), nn.Linear(16, 3, bias=False))
# Token ids in, a language model's logits out.
tokens = nn.Sequential(nn.Embedding(50, 16), sx.PositionEmbedding(12, 16), layer(16, 2, 32), nn.LayerNorm(16), nn.Linear(16, 50))
# An nn.ModuleList read as its modules in order, of the pointwise layers.
listed = nn.ModuleList([nn.Linear(4, 12), nn.GELU(approximate="tanh"), nn.SiLU(), nn.Identity(), nn.LayerNorm(12),
                        nn.ReLU(), nn.GELU(), nn.Linear(12, 2)])
# nn.TransformerEncoder itself as the model: names layers.0..., no final norm.
encoder = nn.TransformerEncoder(layer(16, 4, 48, activation="gelu", norm_first=True), 2)

for name, model, x in [("classifier", classifier, torch.randn(1, 32, 8)), ("tagger", tagger, torch.randn(2, 7, 6)),
                       ("tokens", tokens, torch.randint(0, 50, (3, 12))), ("listed", listed, torch.randn(2, 5, 4)),
                       ("encoder", encoder, torch.randn(2, 5, 16))]:
    sx.export(spread_norms(model), x, name, out)
    assert model.training, "export leaves the model's mode as it was"

# Decoders, two inputs: nn.TransformerDecoder (2 post-norm GELU layers and a final norm) and a
# lone pre-norm nn.TransformerDecoderLayer, against a memory of 9 rows.
decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 2, 32, activation="gelu", batch_first=True), 2, norm=nn.LayerNorm(16))
decoder_layer = nn.TransformerDecoderLayer(16, 4, 24, batch_first=True, norm_first=True)
for name, model in [("decoder", decoder), ("decoder_layer", decoder_layer)]:
    sx.export(spread_norms(model), torch.randn(2, 6, 16), name, out, memory=torch.randn(2, 9, 16))


# The classifier trained: one row of 32 is a prototype (of 5) plus noise, the rest noise; the
# label is the prototype's index. 300 AdamW steps of 64 sequences.
data = torch.Generator().manual_seed(1)
prototypes = 2.0 * torch.randn(5, 8, generator=data)


def draw(n):
    x, y = torch.randn(n, 32, 8, generator=data), torch.randint(0, 5, (n,), generator=data)
    x[torch.arange(n), torch.randint(0, 32, (n,), generator=data)] = prototypes[y] + 0.5 * torch.randn(n, 8, generator=data)
    return x, y


trained = nn.Sequential(nn.Linear(8, 32), sx.PositionEmbedding(32, 32),
                        nn.TransformerEncoder(layer(32, 4, 64, dropout=0.0, activation="gelu"), 2), sx.MeanPool(), nn.Linear(32, 5))
opt = torch.optim.AdamW(trained.parameters(), lr=3e-3)
for _ in range(300):
    x, y = draw(64)
    loss = nn.functional.cross_entropy(trained(x)[:, 0], y)
    opt.zero_grad()
    loss.backward()
    opt.step()
sx.export(trained, (1, 32, 8), "trained", out)
calibration, _ = draw(128)
test, labels = draw(500)
with torch.no_grad():
    logits = trained.eval()(test)[:, 0]
save_safetensors(os.path.join(out, "trained.data.safetensors"),
                 {"calibration": calibration, "test": test, "labels": labels.int(), "predictions": logits.argmax(-1).int(), "logits": logits})
accuracy = (logits.argmax(-1) == labels).float().mean().item()
assert accuracy > 0.9, f"the trained classifier's accuracy is {accuracy}"


# The refusals: every module the exporter cannot take, by its path and class, in one error.
refused = functools.partial(refusals.refused, out)


class Mine(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return x + self.fc(x)


class Residual(nn.Sequential):
    def forward(self, x):
        return x + super().forward(x)


# A chain of the listed modules is read as one: every module it cannot take, by path and class.
message = refused(nn.Sequential(nn.Linear(8, 16), nn.TransformerEncoderLayer(16, 4, 64), nn.Linear(3, 4),
                                nn.TransformerEncoder(layer(16, 2, 32, activation=torch.tanh), 1)),
                  (1, 4, 8),
                  "'1' (TransformerEncoderLayer): batch_first=False",
                  "'2' (Linear): takes rows of width 3, but the step before gives width 16",
                  "'3.layers.0' (TransformerEncoderLayer): activation tanh")
assert message.count("\n") == 3, message
# A module of one's own, or a chain holding one, is traced: it needs an example tensor, and what it
# cannot read is named by module and source line (tests/torch/make_traced.py).
refused(nn.Sequential(nn.Linear(8, 8), Mine()), (1, 4, 8), "give an example input tensor, not a shape")
message = refused(nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(4), Residual(nn.Linear(16, 16))), torch.randn(1, 4, 8),
                  "module '1' at refusals.py:", "BatchNorm1d is not a module stformer_export reads")
refused(nn.Sequential(nn.Linear(8, 8), nn.Embedding(10, 8)), (1, 4, 8), "'1' (Embedding): an nn.Embedding takes token ids")
refused(nn.Sequential(nn.Linear(8, 8)), (1, 4), "'0' (Linear): takes rows [B, N, D], but the input is token ids")
refused(nn.Sequential(sx.PositionEmbedding(4, 8)), (1, 6, 8), "'0' (PositionEmbedding): 6 rows, but positions for 4 only")
refused(nn.TransformerEncoder(layer(8, 2, 16, activation=torch.tanh), 1), (1, 4, 8), "'layers.0' (TransformerEncoderLayer): activation tanh")
refused(nn.Dropout(), (1, 4, 8), "no step stformer computes")
refused(decoder, (2, 6, 16), "a decoder takes rows (B, N, D) and a memory (B, M, D)")
refused(nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 2, 32, activation=torch.tanh), 1), (2, 6, 16),
        "'layers.0' (TransformerDecoderLayer): batch_first=False", "'layers.0' (TransformerDecoderLayer): activation tanh", memory_shape=(2, 9, 16))
refused(nn.Linear(8, 8), (1, 4, 8), "not a C++ identifier", name="two words")
nan = nn.Linear(8, 8)
with torch.no_grad():
    nan.weight[2, 3] = float("nan")
refused(nan, (1, 4, 8), "parameters hold a NaN or an infinity: weight")
assert not os.path.exists(os.path.join(out, "bad.hpp")), "a refused model writes nothing"
print(f"stformer_export: 8 models written to {out} (the trained one {100 * accuracy:.1f}% accurate); 10 refusals checked")
