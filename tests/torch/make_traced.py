#!/usr/bin/python3
"""The exporter's tracing (python/stformer_trace.py), its PyTorch side: models with a forward of
their own (tests/torch/traced_models.py, in the styles of timm's ViT, BERT, nanoGPT, GPT-J, a
SwiGLU layer, nn.MultiheadAttention and nn.TransformerEncoder with causal masks, a llama-style model
with RMSNorm written out, torchvision's VisionTransformer as it is, the Keyword Transformer KWT-1,
the PyTorch tutorial's sequence-first language model, BERT with its attention_mask and a model
given PyTorch's key_padding_mask, exported with key_padding=True), each exported
with an example input and PyTorch's output for it (tests/test_torch_traced.cpp runs them); and the
refusals, checked here: each names the operation, its module and its source line.

usage: /usr/bin/python3 tests/torch/make_traced.py OUT_DIR
writes OUT_DIR/{vit,bert,gpt,mha,encoded,llama,tvit,kwt,tutorial,pbert,padded,pooled}.{hpp,safetensors,example.safetensors,inputs.safetensors}
(inputs: 32 calibration inputs and 200 test inputs, one sequence each, for the integer model; for
pbert, padded and pooled their key masks too, calibration_keys and test_keys), and
for a model of float inputs OUT_DIR/NAME.grads.safetensors: a random gradient of its output and
PyTorch's gradient of its input for it
"""
import functools
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, here)
import stformer_export as sx  # noqa: E402
import refusals  # noqa: E402
from stformer_torch import save_safetensors  # noqa: E402
import traced_models as tm  # noqa: E402
from torchvision.models.vision_transformer import VisionTransformer  # noqa: E402

torch.manual_seed(7)
torch.set_num_threads(1)
out = sys.argv[1]


def spread(model):
    """Norms, scales and tokens away from their initial values, as a trained model's are."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight", "ln.weight",
                              "_norm.weight")):
                p.uniform_(0.5, 1.5)
            elif name.endswith(("norm.bias", "norm1.bias", "norm2.bias", "ln_1.bias", "ln_2.bias", "ln_f.bias", "ln.bias", "_norm.bias")):
                p.normal_(0, 0.3)
            elif name.endswith(("ln.weight",)) or ".ln_" in name and name.endswith("weight"):
                p.uniform_(0.5, 1.5)
            elif name.endswith(("gamma", "cls_token", "pos_embed", "in_proj_bias", "class_token", "pos_embedding")):
                p.normal_(0, 0.5)
            elif not p.any():  # a parameter left at zero (torchvision's head): an output that cannot differ
                p.normal_(0, 0.5)
    return model


class Keywords:
    """A keyword-spotting task of 12 words, for KWT: each word a fixed pattern of 98 frames of 40
    coefficients, heard through noise of the same strength."""

    def __init__(self):
        g = torch.Generator().manual_seed(12)
        self.words = torch.randn(12, 98, 40, generator=g)
        self.g = g

    def draw(self, count):
        labels = torch.randint(0, 12, (count,), generator=self.g)
        return self.words[labels] + torch.randn(count, 98, 40, generator=self.g), labels


def trained_kwt(task):
    """KWT-1 whose classifier is trained on the task (the layers below it as initialised: a linear
    probe, 300 steps on the class token's features of 256 inputs; its test accuracy checked), so
    that its logits decide and int8's argmax is a fair test, at a fraction of full training's cost."""
    model = tm.KeywordTransformer().eval()

    def features(x):
        with torch.no_grad():
            h = model.patch_proj(x)
            h = torch.cat([model.class_emb.expand(h.shape[0], 1, -1), h], dim=1) + model.pos_emb
            for layer in model.enc_layers:
                h = layer(h)
            return h[:, 0]
    x, y = task.draw(256)
    f = features(x)
    opt = torch.optim.Adam(model.mlp_head.parameters(), lr=1e-2)
    for _ in range(300):
        loss = F.cross_entropy(model.mlp_head(f), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y = task.draw(200)
    accuracy = (model.mlp_head(features(x)).argmax(-1) == y).float().mean().item()
    assert accuracy > 0.9, f"KWT's classifier did not learn its task: accuracy {accuracy}"
    return model.train()


def trained_tutorial():
    """The tutorial's model trained for 150 steps on a task with an answer (each token is the one
    before it plus 7, modulo 100), so that its logits decide and int8's argmax is a fair test."""
    model = tm.TutorialLM()
    mask = nn.Transformer.generate_square_subsequent_mask(12)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        start = torch.randint(0, 100, (1, 32))
        ids = (start + 7 * torch.arange(13).unsqueeze(1)) % 100  # (13, 32): sequence-first
        loss = F.cross_entropy(model(ids[:-1], mask).reshape(-1, 100), ids[1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 1.0, f"the tutorial's model did not learn its task: loss {loss.item()}"
    return model


keywords = Keywords()


def lengths_mask(batch, n, lengths, token):
    """A padding mask of sequences of the given lengths: BERT's (token: 1 for a token, 0 after it, int64)
    or PyTorch's key_padding_mask (True after it)."""
    rows = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    return rows.long() if token else ~rows


def seeded(seed, make):
    """make() with the generator at seed: each model's weights and example its own, whatever the others."""
    torch.manual_seed(seed)
    return make()


models = [seeded(1, lambda: ("vit", tm.SmallVit(12), torch.randn(2, 9, 12))),
          seeded(2, lambda: ("bert", tm.SmallBert(), torch.randint(0, 40, (2, 16)))),
          seeded(3, lambda: ("gpt", tm.SmallGpt(), torch.randint(0, 48, (2, 16)))),
          seeded(4, lambda: ("mha", tm.MhaModel(), torch.randn(2, 10, 6))),
          seeded(5, lambda: ("encoded", tm.Encoded(), torch.randn(2, 8, 5))),
          seeded(6, lambda: ("llama", tm.SmallLlama(), torch.randint(0, 64, (2, 12)))),
          # torchvision's own, as it is: a Conv2d patch embedding on an image (B, 3, 32, 32)
          seeded(7, lambda: ("tvit", VisionTransformer(image_size=32, patch_size=8, num_layers=4, num_heads=4, hidden_dim=64, mlp_dim=128,
                                                       num_classes=10), torch.randn(2, 3, 32, 32))),
          # the Keyword Transformer KWT-1 as its paper gives it: 98 MFCC frames of 40, D 64, 12 post-norm layers
          seeded(9, lambda: ("kwt", trained_kwt(keywords), keywords.draw(2)[0])),
          # sequence-first: ids (N, B) and the causal src_mask the tutorial passes
          seeded(8, lambda: ("tutorial", trained_tutorial(), (torch.randint(0, 100, (12, 2)), nn.Transformer.generate_square_subsequent_mask(12)))),
          # key padding: BERT's attention_mask (1 a token, 0 padding) made additive; PyTorch's key_padding_mask (True: padding)
          seeded(10, lambda: ("pbert", tm.PaddedBert(), (torch.randint(0, 40, (2, 16)), lengths_mask(2, 16, [16, 11], token=True)))),
          seeded(11, lambda: ("padded", tm.Padded(), (torch.randn(2, 10, 6), lengths_mask(2, 10, [10, 7], token=False)))),
          # and the mean of the rows that exist: (x * m).sum(1) / m.sum(1)
          seeded(12, lambda: ("pooled", tm.PaddedMean(), (torch.randn(2, 10, 6), lengths_mask(2, 10, [10, 6], token=False)))),
          # over a memory (an encoder's output): cross-attention written out and nn.MultiheadAttention's
          seeded(13, lambda: ("seq2seq", tm.Seq2SeqDecoder(), torch.randn(2, 8, 16))),
          # the llama family: rotary positions on pairs (2i, 2i + 1) and grouped-query attention (llama2.c's);
          # on halves (i, i + Dh/2), multi-query with biases, Θ 500000 (GPT-NeoX's, Hugging Face's); the last position's logits
          seeded(15, lambda: ("rllama", tm.RotaryLlama(), torch.randint(0, 64, (2, 16)))),
          seeded(16, lambda: ("rneox", tm.RotaryLlama(halves=True), torch.randint(0, 64, (2, 16))))]
memories = {"seq2seq": seeded(14, lambda: torch.randn(2, 5, 16))}


def draw(x, count):
    """count inputs like x, one at a time, in stformer's layout (B, N, ...): rows from N(0, 1), or token ids."""
    if isinstance(x, tuple):  # the tutorial's sequence-first ids and its causal mask; or the input and a key mask
        x = x[0].transpose(0, 1) if x[1].dim() == 2 and x[1].dtype.is_floating_point else x[0]
    if x.dim() == 4:  # an image (B, C, H, W): its C·H rows of W pixels
        x = x.reshape(x.shape[0], x.shape[1] * x.shape[2], x.shape[3])
    if x.dtype == torch.int64:
        return torch.randint(0, int(x.max()) + 1, (count, *x.shape[1:]), dtype=torch.int32)
    return torch.randn(count, *x.shape[1:])


for seed, (name, model, x) in enumerate(models):
    torch.manual_seed(100 + seed)
    path = sx.export(model if name in ("tutorial", "kwt") else spread(model), x, name, out, key_padding=name in ("pbert", "padded", "pooled"),
                     memory=memories.get(name))
    if name in ("rllama", "rneox"):  # every position's logits, for the decoding pass (test_torch_traced)
        model.eval()
        with torch.no_grad():
            save_safetensors(os.path.join(out, f"{name}.rows.safetensors"), {"logits": model(x, last=False)})
        model.train()
    if name in memories:  # run with its memory (test_torch_traced: memory_round_trip)
        assert "using seq2seq = stformer::WithMemory<true," in open(path).read() and "Repeat<stformer::WithMemory<true," in open(path).read()
        continue
    if torch.is_tensor(x) and x.is_floating_point():  # training's backward: the input's gradient for a random one of the output
        model.eval()
        xg = x.clone().requires_grad_(True)
        y = model(xg)
        dy = torch.randn_like(y)
        y.backward(dy)
        model.train()
        save_safetensors(os.path.join(out, f"{name}.grads.safetensors"), {"grad_output": dy.detach(), "grad_input": xg.grad.detach()})
    # for the integer model: calibration inputs and test inputs (test_torch_traced)
    if name == "kwt":  # the task's own inputs
        inputs = {"calibration": keywords.draw(32)[0], "test": keywords.draw(200)[0]}
    else:
        inputs = {"calibration": draw(x, 32), "test": draw(x, 200)}
    if name in ("pbert", "padded", "pooled"):  # their key masks: sequences of N/2 to N rows
        for part in ("calibration", "test"):
            count, n = inputs[part].shape[0], inputs[part].shape[1]
            inputs[part + "_keys"] = lengths_mask(count, n, torch.randint(n // 2, n + 1, (count,)).tolist(), token=True).to(torch.uint8)
    save_safetensors(os.path.join(out, f"{name}.inputs.safetensors"), inputs)
    assert model.training, "export leaves the model's mode as it was"
    header = open(path).read()
    assert ("static constexpr bool causal = true;" in header) == (name in ("gpt", "mha", "encoded", "llama", "tutorial", "rllama", "rneox")), f"{name}: causal or not"


# The refusals, every reason at once, each with its module and source line.
refused = functools.partial(refusals.refused, out)


class Unread(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        x = self.bn(self.fc(x))
        x = x + torch.sin(x)
        return torch.cumsum(x, dim=1)


message = refused(Unread(), torch.randn(2, 4, 8),
                  "module 'bn' at make_traced.py:",
                  "x = self.bn(self.fc(x)): BatchNorm1d is not a module stformer_export reads",
                  "sin() at make_traced.py:", "x = x + torch.sin(x): not an operation stformer_export reads",
                  "cumsum() at make_traced.py:", "return torch.cumsum(x, dim=1): not an operation")
assert message.count("\n") == 3, message


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return x


refused(Branchy(), torch.randn(2, 4, 8), "torch.fx cannot follow the model's forward", "control flow that depends on the input's values")


class Windowed(nn.Module):
    """A mask that is not the causal one (a band): refused, not run without it."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        band = torch.ones(4, 4, dtype=torch.bool).triu(1) | torch.ones(4, 4, dtype=torch.bool).tril(-2)
        self.register_buffer("band", band)

    def forward(self, x):
        return self.attn(x, x, x, attn_mask=self.band)[0]


refused(Windowed(), torch.randn(2, 4, 8), "module 'attn'", "an attn_mask that is not the causal one")


class Cross(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(self.a(x), self.b(x), self.b(x))[0]


refused(Cross(), torch.randn(2, 4, 8), "queries, keys and values from different tensors", "export with memory=")


# Rotary attention without the causal mask (its mask buffer all zeros): refused, not run causal.
class UnmaskedRotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = tm.PairsRotaryAttention(16, 4, 2, 8)
        self.attention.mask.zero_()

    def forward(self, x):
        return x + self.attention(x)


refused(UnmaskedRotary(), torch.randn(2, 8, 16), "softmax() in 'attention' at traced_models.py:", "not the rotary attention stformer computes",
        "causal")


# Over a memory (memory=, the forward's second input): what stformer's WithMemory cannot hold.
class OverMemory(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.fc = nn.Linear(8, 3)
        self.register_buffer("hidden", torch.zeros(4, 5, dtype=torch.bool).index_fill(1, torch.tensor([0]), True))

    def forward(self, x, memory):
        if self.how == "bare":  # no residual around it
            return self.attn(x, memory, memory)[0]
        if self.how == "masked":
            return x + self.attn(x, memory, memory, attn_mask=self.hidden)[0]
        if self.how == "scaled":  # the keys and values from the memory times 2
            twice = memory * 2
            return x + self.attn(x, twice, twice)[0]
        if self.how == "head":  # a step that changes the rows' width
            return self.fc(x + self.attn(x, memory, memory)[0])
        return self.fc(x)  # the memory not read


x_mem = (torch.randn(2, 4, 8), torch.randn(2, 5, 8))
refused(OverMemory("bare"), x_mem[0], "'attn' (nn.MultiheadAttention: 2 heads over the memory): a cross-attention is read as x + attention(x, "
        "memory)", memory=x_mem[1])
refused(OverMemory("masked"), x_mem[0], "module 'attn' at make_traced.py:", "a mask over the memory's rows", memory=x_mem[1])
refused(OverMemory("scaled"), x_mem[0], "read the memory itself or an nn.LayerNorm of it", memory=x_mem[1])
refused(OverMemory("head"), x_mem[0], "'fc' (nn.Linear(8, 3)): a model over a memory is stformer's WithMemory, whose steps keep the rows in place",
        memory=x_mem[1])
refused(OverMemory("unread"), x_mem[0], "memory= is given, but no attention of the model reads the forward's second input", memory=x_mem[1])
refused(nn.Sequential(nn.Linear(8, 8)), x_mem[0], "a memory is given, but a chain of modules reads none", memory=x_mem[1])
refused(OverMemory("bare"), x_mem, "memory=: the forward takes the rows and the memory alone", memory=x_mem[1])


class Mixed(nn.Module):
    """One causal attention and one not: a model is declared causal or not."""

    def __init__(self):
        super().__init__()
        self.one = nn.MultiheadAttention(8, 2, batch_first=True)
        self.two = nn.MultiheadAttention(8, 2, batch_first=True)
        self.register_buffer("mask", torch.ones(4, 4, dtype=torch.bool).triu(1))

    def forward(self, x):
        x = x + self.one(x, x, x, attn_mask=self.mask)[0]
        return x + self.two(x, x, x)[0]


refused(Mixed(), torch.randn(2, 4, 8), "some attentions are causal and some are not")
refused(tm.SmallGpt(), torch.randint(0, 48, (2, 16)), "causal=False, but the model's attention is causal", causal=False)
refused(tm.SmallVit(12), (2, 9, 12), "give an example input tensor, not a shape")


class Shifted(nn.Module):
    """Attention written out whose scale is neither 1/sqrt(head width) nor 1/sqrt(width)."""

    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        a = (q @ k.transpose(-2, -1) * 0.9).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, c))


refused(Shifted(), torch.randn(2, 4, 8), "not multi-head attention as stformer computes it")


class ScaledAfterRelu(nn.Module):  # a constant after a step not linear in its parameters: not folded
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return F.relu(self.fc(x)) * 0.5


refused(ScaledAfterRelu(), torch.randn(2, 4, 8), "a product by the constant 0.5 (read right after an nn.Embedding, a Linear or a norm",
        "return F.relu(self.fc(x)) * 0.5")


# Key padding: refused without key_padding=True (named at each attention that reads it), without
# padding in the example, when nothing reads the mask, and where the rows' mean would average padding.
x_pad = (torch.randn(2, 10, 6), lengths_mask(2, 10, [10, 7], token=False))
message = refused(tm.Padded(), x_pad, "module 'attn' at traced_models.py:", "a key padding mask: export with key_padding=True",
                  ".softmax() in 'written' at traced_models.py:", "a mask made from the forward's other input is a key mask: export with key_padding=True",
                  "module 'encoder' at traced_models.py:")
assert message.count("\n") == 3, message
refused(tm.PaddedBert(), (torch.randint(0, 40, (2, 16)), torch.ones(2, 16, dtype=torch.long)),
        "every sequence needs a row that exists and one sequence a padded row", key_padding=True)
refused(tm.PaddedBert(), torch.randint(0, 40, (2, 16)), "key_padding=True: the example is (input, mask)", key_padding=True)


class Unmasked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)

    def forward(self, x, padding):
        return self.fc(x)


refused(Unmasked(), x_pad, "no attention of the model reads its second input as a key mask", key_padding=True)


class MeanOverPadding(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, padding):
        x = self.fc(x)
        x = x + self.attn(x, x, x, key_padding_mask=padding)[0]
        return x.mean(dim=1)


refused(MeanOverPadding(), x_pad, "the rows' mean in a model with a key mask", "return x.mean(dim=1)", key_padding=True)


class MaskedMax(MeanOverPadding):  # the rows times the key mask, read otherwise than in their mean
    def forward(self, x, padding):
        x = self.fc(x)
        x = x + self.attn(x, x, x, key_padding_mask=padding)[0]
        return (x * (~padding).unsqueeze(-1).float()).amax(dim=1)


refused(MaskedMax(), x_pad, "the rows times the key mask are read in the mean of the rows that exist alone", key_padding=True)


class HalfMasked(nn.Module):
    """Two attentions, one of which ignores the padding mask: stformer's pass would hide the padded keys in both."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.one = nn.MultiheadAttention(8, 2, batch_first=True)
        self.two = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, padding):
        x = self.fc(x)
        x = x + self.one(x, x, x, key_padding_mask=padding)[0]
        return x + self.two(x, x, x)[0]


refused(HalfMasked(), x_pad, "module 'two' at make_traced.py:", "an attention that does not read the key mask", key_padding=True)
