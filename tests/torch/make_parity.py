#!/usr/bin/python3
"""Writes the PyTorch side of the parity test: for three SPEC models, the weights, inputs,
outputs, loss, every parameter gradient, and the losses and parameters after 10 AdamW steps.

usage: /usr/bin/python3 tests/torch/make_parity.py OUT_DIR
writes OUT_DIR/{pointer,set,lm}.safetensors with tensors (and layers.safetensors: PyTorch's own
LayerNorm, GELU, SiLU and Linear modules, an RMSNorm and a feed-forward layer, in an
nn.Sequential)
  param.<name>   initial weights (SPEC names)        input.*   inputs and targets
  output         model output                        loss      [1]
  grad.<name>    dL/d<name> at the initial weights
  step_losses    [10] loss before each AdamW step     final.<name> weights after the 10 steps
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import stformer_torch as st  # noqa: E402

torch.set_num_threads(1)
LR, WD, STEPS = 0.01, 0.01, 10


def case(path, model, inputs, loss_fn, extra=None):
    def named(prefix, pairs):
        return {f"{prefix}{n}": t.detach().clone() for n, t in pairs}

    params = named("param.", model.named_parameters())
    out = model(*inputs["args"])
    loss = loss_fn(out)
    loss.backward()
    tensors = dict(params)
    tensors.update({f"input.{k}": v for k, v in inputs["save"].items()})
    tensors["output"] = out.detach()
    tensors["loss"] = loss.detach().reshape(1)
    tensors.update(named("grad.", ((n, p.grad) for n, p in model.named_parameters())))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = loss_fn(model(*inputs["args"]))
        losses.append(loss.item())
        loss.backward()
        opt.step()
    tensors["step_losses"] = torch.tensor(losses, dtype=torch.float32)
    tensors.update(named("final.", model.named_parameters()))
    tensors.update(extra or {})
    st.save_safetensors(path, tensors, {"torch": torch.__version__})


class RMSNorm(torch.nn.Module):
    """nn.RMSNorm(d) of later PyTorch versions: x / sqrt(mean x² + eps) * weight, eps float's."""

    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + torch.rand(d))

    def forward(self, x):
        eps = torch.finfo(x.dtype).eps
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight


class FeedForward(torch.nn.Module):
    def __init__(self, d, f, act):
        super().__init__()
        self.fc1, self.act, self.fc2 = torch.nn.Linear(d, f), act, torch.nn.Linear(f, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ParallelBlock(torch.nn.Module):
    """GPT-J's block: one LayerNorm, attention and feed-forward side by side on it, both added to
    the stream: x + attn(ln_1(x)) + mlp(ln_1(x)), the attention causal."""

    def __init__(self, d, heads, f):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = FeedForward(d, f, torch.nn.GELU())

    def forward(self, x):
        n = x.shape[1]
        causal = torch.triu(torch.full((n, n), float("-inf")), 1)
        h = self.ln_1(x)
        return x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0] + self.mlp(h)


class SwiGLU(torch.nn.Module):
    """The SwiGLU feed-forward layer of LLaMA-style models, bias-free: w2(silu(w1 x) * w3 x)."""

    def __init__(self, d, f):
        super().__init__()
        self.w1 = torch.nn.Linear(d, f, bias=False)
        self.w3 = torch.nn.Linear(d, f, bias=False)
        self.w2 = torch.nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class LayerScale(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gamma = torch.nn.Parameter(1 + 0.5 * torch.randn(d))

    def forward(self, x):
        return x * self.gamma


class LayerScaleBlock(torch.nn.Module):
    """A pre-norm block with LayerScale on both branches (timm's ViT with init_values), LayerNorm
    eps 1e-6, key-padded attention."""

    def __init__(self, d, heads, f):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(d, eps=1e-6)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ls1 = LayerScale(d)
        self.norm2 = torch.nn.LayerNorm(d, eps=1e-6)
        self.mlp = FeedForward(d, f, torch.nn.GELU())
        self.ls2 = LayerScale(d)

    def forward(self, x, pad):
        h = self.norm1(x)
        x = x + self.ls1(self.attn(h, h, h, key_padding_mask=pad, need_weights=False)[0])
        return x + self.ls2(self.mlp(self.norm2(x)))


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)

    # Encoder blocks: SPEC's pointer model (smaller), padded sets, NLL of the largest-norm point.
    b, n = 4, 12
    x = torch.randn(b, n, 2) + torch.randn(b, 1, 2)
    lengths = torch.tensor([12, 9, 12, 5])
    keys = torch.arange(n)[None, :] < lengths[:, None]
    norms = x.norm(dim=-1).masked_fill(~keys, -1)
    target = norms.argmax(-1)
    model = st.PointerModel(2, 16, 2, 32, 2)
    case(os.path.join(out_dir, "pointer.safetensors"), model,
         {"args": (x, keys), "save": {"x": x, "keys": keys, "target": target.int()}},
         lambda logp: torch.nn.functional.nll_loss(logp[:, 0, :], target))

    # Set Transformer (ISAB + PMA), mean Euclidean distance to the largest-norm point.
    x = torch.randn(b, n, 2) + torch.randn(b, 1, 2)
    y = x[torch.arange(b), x.norm(dim=-1).argmax(-1)]
    model = st.SetTransformer(2, 16, 4, 4, 2)
    case(os.path.join(out_dir, "set.safetensors"), model,
         {"args": (x,), "save": {"x": x, "y": y[:, None, :]}},
         lambda pred: (pred[:, 0, :] - y).norm(dim=-1).mean())

    # A small language model, softmax cross-entropy on the next token.
    v, length = 50, 8
    ids = torch.randint(0, v, (b, length))
    nxt = torch.randint(0, v, (b,))
    model = st.LanguageModel(v, length, 16, 2, 32, 2)
    case(os.path.join(out_dir, "lm.safetensors"), model,
         {"args": (ids,), "save": {"ids": ids.int(), "target": nxt.int()}},
         lambda logits: torch.nn.functional.cross_entropy(logits[:, 0, :], nxt))

    # PyTorch's layers in an nn.Sequential (names 0.weight, 7.fc1.weight, ...; 3 has no bias), the norms'
    # weights and biases away from ones and zeros, a row of constant value into the first
    # LayerNorm; mean squared error against a random target.
    nn = torch.nn
    model = nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 24), nn.GELU(), nn.Linear(24, 24, bias=False), nn.SiLU(), RMSNorm(24),
                          nn.GELU(approximate="tanh"), FeedForward(24, 48, nn.GELU()), nn.LayerNorm(24), nn.Linear(24, 3))
    with torch.no_grad():
        for i in (0, 8):
            model[i].weight.uniform_(0.5, 1.5)
            model[i].bias.normal_()
    x = torch.randn(b, n, 6)
    x[1, 3, :] = 2.5
    y = torch.randn(b, n, 3)
    case(os.path.join(out_dir, "layers.safetensors"), model,
         {"args": (x,), "save": {"x": x, "y": y}},
         lambda out: (out - y).pow(2).mean())

    # PyTorch's own nn.TransformerEncoderLayer in its four forms (post-norm and norm_first, ReLU
    # and GELU), dropout 0, key-padded; the GELU post-norm one causal too (src_mask: −∞ above
    # the diagonal). Each layer's LayerNorms away from ones and zeros.
    d, heads, f = 16, 2, 32
    x = torch.randn(b, n, d)
    y = torch.randn(b, n, d)
    lengths = torch.tensor([12, 9, 12, 5])
    pad = torch.arange(n)[None, :] >= lengths[:, None]  # PyTorch's key_padding_mask: true = ignore
    causal = torch.triu(torch.full((n, n), float("-inf")), 1)
    for act in ("relu", "gelu"):
        for first in (False, True):
            layer = nn.TransformerEncoderLayer(d, heads, f, dropout=0.0, activation=act, batch_first=True, norm_first=first)
            with torch.no_grad():
                for norm in (layer.norm1, layer.norm2):
                    norm.weight.uniform_(0.5, 1.5)
                    norm.bias.normal_(0, 0.5)
            mask = causal if (act, first) == ("gelu", False) else None
            name = f"encoder_{'pre' if first else 'post'}_{act}.safetensors"
            case(os.path.join(out_dir, name), layer,
                 {"args": (x, mask, pad), "save": {"x": x, "y": y, "keys": ~pad}},
                 lambda out: (out - y).pow(2).mean())

    # Blocks a user declares from combinators (docs/own-model.md): GPT-J's parallel block
    # (causal), a bias-free SwiGLU feed-forward layer, a LayerScale pre-norm block (key-padded).
    # The norms' and scales' parameters away from ones and zeros.
    def spread(model):
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0, 0.5)
        return model

    case(os.path.join(out_dir, "user_parallel.safetensors"), spread(ParallelBlock(d, heads, f)),
         {"args": (x,), "save": {"x": x, "y": y}}, lambda out: (out - y).pow(2).mean())
    case(os.path.join(out_dir, "user_swiglu.safetensors"), SwiGLU(d, f),
         {"args": (x,), "save": {"x": x, "y": y}}, lambda out: (out - y).pow(2).mean())
    case(os.path.join(out_dir, "user_layerscale.safetensors"), spread(LayerScaleBlock(d, heads, f)),
         {"args": (x, pad), "save": {"x": x, "y": y, "keys": ~pad}}, lambda out: (out - y).pow(2).mean())

    # nn.MultiheadAttention alone, queries against a key-padded memory (cross-attention).
    class Cross(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

        def forward(self, q, kv, pad):
            return self.attn(q, kv, kv, key_padding_mask=pad, need_weights=False)[0]

    kv = torch.randn(b, 10, d)
    kv_pad = torch.arange(10)[None, :] >= torch.tensor([10, 4, 7, 10])[:, None]
    case(os.path.join(out_dir, "mha.safetensors"), Cross(),
         {"args": (x, kv, kv_pad), "save": {"x": x, "y": y, "m": kv, "keys": ~kv_pad}},
         lambda out: (out - y).pow(2).mean())

    # nn.TransformerEncoder: two post-norm GELU layers (layers.0.*, layers.1.*) and a final norm.
    layer = nn.TransformerEncoderLayer(d, heads, f, dropout=0.0, activation="gelu", batch_first=True)
    model = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(d), enable_nested_tensor=False)
    with torch.no_grad():
        for norm in [m for m in model.modules() if isinstance(m, nn.LayerNorm)]:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0, 0.5)
    case(os.path.join(out_dir, "encoder_stack.safetensors"), model,
         {"args": (x, None, pad), "save": {"x": x, "y": y, "keys": ~pad}},
         lambda out: (out - y).pow(2).mean())

    # nn.TransformerDecoderLayer, post-norm with GELU and norm_first with ReLU: a causal tgt_mask,
    # the memory key-padded.
    mem_len = 10
    memory = torch.randn(b, mem_len, d)
    mem_pad = torch.arange(mem_len)[None, :] >= torch.tensor([10, 4, 7, 10])[:, None]
    for act, first in (("gelu", False), ("relu", True)):
        layer = nn.TransformerDecoderLayer(d, heads, f, dropout=0.0, activation=act, batch_first=True, norm_first=first)
        with torch.no_grad():
            for norm in (layer.norm1, layer.norm2, layer.norm3):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.normal_(0, 0.5)
        name = f"decoder_{'pre' if first else 'post'}_{act}.safetensors"
        case(os.path.join(out_dir, name), layer,
             {"args": (x, memory, causal, None, None, mem_pad), "save": {"x": x, "y": y, "m": memory, "keys": ~mem_pad}},
             lambda out: (out - y).pow(2).mean())

    # nn.TransformerDecoder: two post-norm GELU layers over the same key-padded memory and a final
    # norm; also the loss's gradient with respect to the memory (every layer's cross-attention's).
    layer = nn.TransformerDecoderLayer(d, heads, f, dropout=0.0, activation="gelu", batch_first=True)
    model = nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(d))
    with torch.no_grad():
        for norm in [m for m in model.modules() if isinstance(m, nn.LayerNorm)]:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0, 0.5)
    mem = memory.clone().requires_grad_()
    (model(x, mem, causal, None, None, mem_pad) - y).pow(2).mean().backward()
    model.zero_grad()
    case(os.path.join(out_dir, "decoder_stack.safetensors"), model,
         {"args": (x, memory, causal, None, None, mem_pad), "save": {"x": x, "y": y, "m": memory, "keys": ~mem_pad}},
         lambda out: (out - y).pow(2).mean(), {"grad_input.m": mem.grad})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "parity")
