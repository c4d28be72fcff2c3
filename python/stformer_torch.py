"""stformer's models in PyTorch: SPEC's mathematics, module and parameter names, for training at scale
(python/train_distributed.py) and as the reference stformer is checked against (tests/torch).

Module and parameter names are SPEC's, so `model.state_dict()` saved as safetensors
(`save_safetensors`) is a checkpoint that stformer loads by name.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn


class ScaleNorm(nn.Module):
    """y = g x / max(|x|, 1e-5), g initialised to sqrt(D)."""

    def __init__(self, d):
        super().__init__()
        self.g = nn.Parameter(torch.tensor([math.sqrt(d)]))

    def forward(self, x):
        return self.g * x / x.norm(dim=-1, keepdim=True).clamp(min=1e-5)


def xavier(linear):
    nn.init.xavier_normal_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


def kaiming(linear):
    nn.init.kaiming_normal_(linear.weight)  # fan-in, gain sqrt(2)
    nn.init.zeros_(linear.bias)
    return linear


class MultiHeadAttention(nn.Module):
    def __init__(self, dq, dkv, d, h):
        super().__init__()
        self.h = h
        self.scale = 1 / math.sqrt(d // h)
        self.wq, self.wk, self.wv = xavier(nn.Linear(dq, d)), xavier(nn.Linear(dkv, d)), xavier(nn.Linear(dkv, d))
        self.wo = xavier(nn.Linear(d, d))

    def forward(self, xq, xkv, causal=False, keys=None):
        b, nq, nk, h = xq.shape[0], xq.shape[1], xkv.shape[1], self.h
        q = self.wq(xq).view(b, nq, h, -1).transpose(1, 2)
        k = self.wk(xkv).view(b, nk, h, -1).transpose(1, 2)
        v = self.wv(xkv).view(b, nk, h, -1).transpose(1, 2)
        s = self.scale * q @ k.transpose(-1, -2)  # [B, H, Nq, Nk]
        if not causal and keys is None:  # no mask: PyTorch's own softmax (the fast path)
            return self.wo((torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, nq, -1))
        sees = torch.ones(b, 1, nq, nk, dtype=torch.bool)
        if causal:
            sees = sees & torch.ones(nq, nk, dtype=torch.bool).tril()
        if keys is not None:
            sees = sees & keys[:, None, None, :]
        s = s.masked_fill(~sees, float("-inf"))
        m = s.amax(-1, keepdim=True).detach()
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
        a = e / torch.where(z > 0, z, torch.ones_like(z))  # all-masked rows: 0
        o = (a @ v).transpose(1, 2).reshape(b, nq, -1)
        return self.wo(o)


class FeedForward(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.fc1, self.fc2 = kaiming(nn.Linear(d, f)), kaiming(nn.Linear(f, d))

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class EncoderBlock(nn.Module):
    def __init__(self, d, h, f):
        super().__init__()
        self.sn1, self.attn, self.sn2, self.ffn = ScaleNorm(d), MultiHeadAttention(d, d, d, h), ScaleNorm(d), FeedForward(d, f)

    def forward(self, x, causal=False, keys=None):
        n = self.sn1(x)
        x = x + self.attn(n, n, causal, keys)
        return x + self.ffn(self.sn2(x))


class MAB(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.nq, self.nkv, self.attn, self.nff = ScaleNorm(d), ScaleNorm(d), MultiHeadAttention(d, d, d, h), ScaleNorm(d)
        self.fc = kaiming(nn.Linear(d, d))

    def forward(self, x, y, keys=None):
        h = x + self.attn(self.nq(x), self.nkv(y), False, keys)
        return h + torch.relu(self.fc(self.nff(h)))


class ISAB(nn.Module):
    def __init__(self, d, h, m):
        super().__init__()
        self.inducing = nn.Parameter(nn.init.xavier_normal_(torch.empty(m, d)))
        self.mab1, self.mab2 = MAB(d, h), MAB(d, h)

    def forward(self, x, keys=None):
        i = self.inducing.expand(x.shape[0], -1, -1)
        return self.mab2(x, self.mab1(i, x, keys))


class PMA(nn.Module):
    def __init__(self, d, h, k):
        super().__init__()
        self.seeds = nn.Parameter(nn.init.xavier_normal_(torch.empty(k, d)))
        self.mab = MAB(d, h)

    def forward(self, x, keys=None):
        return self.mab(self.seeds.expand(x.shape[0], -1, -1), x, keys)


class PointerAttention(nn.Module):
    def __init__(self, dq, dk, da):
        super().__init__()
        self.wq, self.wk = xavier(nn.Linear(dq, da)), xavier(nn.Linear(dk, da))
        self.da = da

    def forward(self, q, k, keys=None):
        s = self.wq(q) @ self.wk(k).transpose(-1, -2) / math.sqrt(self.da)
        if keys is not None:
            s = s.masked_fill(~keys[:, None, :], float("-inf"))
        return torch.log_softmax(s, dim=-1)


def positional_encoding(length, d):
    pe = torch.zeros(length, d, dtype=torch.float64)
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, i / d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe.float()


class PointerModel(nn.Module):
    """SPEC Example 1, `pointer`."""

    def __init__(self, d_in, d, h, f, blocks):
        super().__init__()
        self.proj = xavier(nn.Linear(d_in, d))
        self.blocks = nn.ModuleList(EncoderBlock(d, h, f) for _ in range(blocks))
        self.sn_v = ScaleNorm(d)
        self.query = nn.Parameter(nn.init.xavier_normal_(torch.empty(1, d)))
        self.sn_q = ScaleNorm(d)
        self.pointer = PointerAttention(d, d, d)

    def forward(self, x, keys=None):
        h = self.proj(x)
        for blk in self.blocks:
            h = blk(h, False, keys)
        q = self.sn_q(self.query.expand(x.shape[0], -1, -1))
        return self.pointer(q, self.sn_v(h), keys)  # [B, 1, N]


class SetTransformer(nn.Module):
    """SPEC Example 1, `set`."""

    def __init__(self, d_in, d, h, m, d_out):
        super().__init__()
        self.proj, self.isab, self.pool, self.head = xavier(nn.Linear(d_in, d)), ISAB(d, h, m), PMA(d, h, 1), xavier(nn.Linear(d, d_out))

    def forward(self, x, keys=None):
        return self.head(self.pool(self.isab(self.proj(x), keys), keys))  # [B, 1, Out]


class LanguageModel(nn.Module):
    """SPEC Example 2."""

    def __init__(self, v, length, d, h, f, blocks):
        super().__init__()
        self.embedding = nn.Embedding(v, d)
        nn.init.normal_(self.embedding.weight)
        self.register_buffer("pe", positional_encoding(length, d), persistent=False)
        self.blocks = nn.ModuleList(EncoderBlock(d, h, f) for _ in range(blocks))
        self.pool = PMA(d, h, 1)
        self.head = xavier(nn.Linear(d, v))

    def forward(self, ids):
        h = self.embedding(ids) + self.pe[: ids.shape[1]]
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.pool(h))  # [B, 1, V]


_DTYPES = {np.dtype("float32"): "F32", np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("uint8"): "U8"}


def save_safetensors(path, tensors, metadata=None):
    """Writes {name: numpy array or tensor} in the safetensors format (no extra package)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy() if torch.is_tensor(t) else t)
        if a.dtype == np.bool_:
            a = a.astype(np.uint8)
        blob = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """({name: tensor}, {metadata}) of a file save_safetensors (or stformer) wrote: F32, I64, I32, U8."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    kinds = {v: k for k, v in _DTYPES.items()}
    tensors = {name: torch.from_numpy(np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], kinds[e["dtype"]].newbyteorder("<"))
                                      .reshape(e["shape"]).copy()) for name, e in header.items()}
    return tensors, metadata
