"""Models written as their authors write them, each an nn.Module with a forward of its own, for
the exporter's tracing (python/stformer_trace.py). Written for these tests in the styles of
timm's ViT, BERT, nanoGPT, GPT-J, a SwiGLU feed-forward layer and llama; small, so that the C++ side
compiles quickly."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class PackedAttention(nn.Module):
    """timm's style: one Linear makes q, k and v; reshape, permute, q @ k^T * scale."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class LayerScale(nn.Module):
    def __init__(self, dim, init=0.1):
        super().__init__()
        self.gamma = nn.Parameter(init * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class VitBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = PackedAttention(dim, heads)
        self.ls1 = LayerScale(dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(0.1), nn.Linear(hidden, dim))
        self.ls2 = LayerScale(dim)

    def forward(self, x):
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class SmallVit(nn.Module):
    """Patches (already flattened) in, a class token, learned positions, two blocks, a head on the token
    (the norm's output and the logits scaled by constants)."""

    def __init__(self, patch, dim=32, depth=2, heads=4, classes=5, patches=9):
        super().__init__()
        self.patch_embed = nn.Linear(patch, dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, patches + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[VitBlock(dim, heads, 2 * dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + self.pos_embed
        x = self.blocks(x)
        x = self.norm(x) * 1.5  # products by constants: read into the norm's and the head's parameters
        return self.head(x[:, 0]) / 2.0


class BertLayer(nn.Module):
    """BERT's style: separate query, key, value; scores by einsum divided by sqrt(head width); post-norm, eps 1e-12."""

    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads, self.width = heads, dim // heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.dense = nn.Linear(dim, dim)
        self.attention_norm = nn.LayerNorm(dim, eps=1e-12)
        self.intermediate = nn.Linear(dim, hidden)
        self.output = nn.Linear(hidden, dim)
        self.output_norm = nn.LayerNorm(dim, eps=1e-12)

    def split(self, t):
        return t.view(t.size(0), t.size(1), self.heads, self.width).permute(0, 2, 1, 3)

    def forward(self, x, extended_mask=None):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(self.width)
        if extended_mask is not None:  # additive: 0 for a token, -10000 for padding
            scores = scores + extended_mask
        probs = nn.functional.softmax(scores, dim=-1)
        context = torch.einsum("bhij,bhjd->bhid", probs, v).permute(0, 2, 1, 3).contiguous()
        context = context.view(context.size(0), context.size(1), -1)
        h = self.attention_norm(self.dense(context) + x)
        return self.output_norm(self.output(F.gelu(self.intermediate(h))) + h)


class SmallBert(nn.Module):
    def __init__(self, vocabulary=40, length=16, dim=32, heads=4, layers=2, classes=3):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocabulary, dim)
        self.position_embeddings = nn.Embedding(length, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(dim, heads, 2 * dim) for _ in range(layers)])
        self.classifier = nn.Linear(dim, classes)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1])
        x = self.norm(self.word_embeddings(ids) + self.position_embeddings(positions))
        for layer in self.layers:
            x = layer(x)
        return self.classifier(x[:, 0])


class CausalSelfAttention(nn.Module):
    """nanoGPT's style: c_attn packed, split, a causal buffer, masked_fill, c_proj."""

    def __init__(self, dim, heads, length):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.register_buffer("bias", torch.tril(torch.ones(length, length)).view(1, 1, length, length))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GptBlock(nn.Module):
    def __init__(self, dim, heads, length):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, length)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(dim, 4 * dim), c_proj=nn.Linear(4 * dim, dim)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        m = self.mlp
        return x + m.c_proj(F.gelu(m.c_fc(self.ln_2(x)), approximate="tanh"))


class SmallGpt(nn.Module):
    def __init__(self, vocabulary=48, length=16, dim=32, heads=4, layers=2):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(vocabulary, dim), wpe=nn.Embedding(length, dim),
                                              h=nn.ModuleList([GptBlock(dim, heads, length) for _ in range(layers)]),
                                              ln_f=nn.LayerNorm(dim)))
        self.lm_head = nn.Linear(dim, vocabulary, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1, self.w2, self.w3 = (nn.Linear(dim, hidden, bias=False), nn.Linear(hidden, dim, bias=False),
                                     nn.Linear(dim, hidden, bias=False))

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class ParallelBlock(nn.Module):
    """GPT-J's block: one norm, attention and feed-forward side by side on it, both added to x."""

    def __init__(self, dim, heads, hidden, length):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = SwiGLU(dim, hidden)
        self.register_buffer("causal", torch.triu(torch.ones(length, length, dtype=torch.bool), 1))

    def forward(self, x):
        h = self.ln(x)
        return x + self.attn(h, h, h, attn_mask=self.causal, need_weights=False)[0] + self.mlp(h)


class MhaModel(nn.Module):
    """nn.MultiheadAttention with a causal attn_mask held in a buffer, a SwiGLU layer, GPT-J's block."""

    def __init__(self, dim=32, heads=4, length=10):
        super().__init__()
        self.inp = nn.Linear(6, dim)
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.register_buffer("mask", torch.triu(torch.full((length, length), float("-inf")), 1))
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn = SwiGLU(dim, 48)
        self.parallel = ParallelBlock(dim, heads, 40, length)
        self.out = nn.Linear(dim, 4)

    def forward(self, x):
        x = self.inp(x)
        h = self.norm(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask, need_weights=False)[0]
        x = x + self.ffn(self.ffn_norm(x))
        return self.out(self.parallel(x))


class Encoded(nn.Module):
    """nn.TransformerEncoder (batch_first) called with a causal mask from its own helper; the head
    reads the last row (the next step's prediction)."""

    def __init__(self, dim=16, heads=2, length=8):
        super().__init__()
        self.embed = nn.Linear(5, dim)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, heads, 32, batch_first=True, dropout=0.0), 2)
        self.length = length
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(self.length)
        return self.head(self.encoder(self.embed(x), mask)[:, -1])


class RMSNorm(nn.Module):
    """llama's style, written out: x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


class LlamaBlock(nn.Module):
    """Pre-RMSNorm, bias-free attention written out (separate q, k, v; causal by a boolean buffer), SwiGLU."""

    def __init__(self, dim, heads, hidden, length):
        super().__init__()
        self.heads = heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.feed_forward = SwiGLU(dim, hidden)
        self.register_buffer("mask", torch.full((1, 1, length, length), float("-inf")).triu(1))

    def forward(self, x):
        b, n, d = x.shape
        h = self.attention_norm(x)
        q, k, v = (w(h).view(b, n, self.heads, d // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(2, 3) / math.sqrt(d // self.heads) + self.mask[:, :, :n, :n]
        out = (F.softmax(scores.float(), dim=-1).type_as(q) @ v).transpose(1, 2).contiguous().view(b, n, d)
        x = x + self.wo(out)
        return x + self.feed_forward(self.ffn_norm(x))


class SmallLlama(nn.Module):
    def __init__(self, vocabulary=64, length=12, dim=32, heads=4, layers=2):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocabulary, dim)
        self.layers = nn.ModuleList([LlamaBlock(dim, heads, 48, length) for _ in range(layers)])
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocabulary, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


class SinusoidalPositions(nn.Module):
    """The PyTorch tutorial's PositionalEncoding: a sine/cosine table [max_len, 1, D] in a buffer,
    added to sequence-first rows (N, B, D), then dropout."""

    def __init__(self, dim, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe = torch.zeros(max_len, 1, dim)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(0)])


class TutorialLM(nn.Module):
    """The tutorial's TransformerModel: sequence-first token ids (N, B), an embedding scaled by
    sqrt(D), sinusoidal positions, nn.TransformerEncoder (batch_first=False) called with the
    src_mask it is given, and a Linear decoder to the vocabulary."""

    def __init__(self, ntoken=100, d_model=32, nhead=2, d_hid=64, nlayers=2, dropout=0.2):
        super().__init__()
        self.pos_encoder = SinusoidalPositions(d_model, dropout)
        self.transformer_encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout), nlayers)
        self.encoder = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.decoder = nn.Linear(d_model, ntoken)

    def forward(self, src, src_mask):
        src = self.encoder(src) * math.sqrt(self.d_model)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, src_mask)
        return self.decoder(output)


class KwtAttention(nn.Module):
    """The Keyword Transformer's attention: bias-free query, key and value, a combining Linear with bias."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.query_dense, self.key_dense, self.value_dense = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.combine_heads = nn.Linear(dim, dim)

    def separate_heads(self, x):
        b, n, d = x.shape
        return x.reshape(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = (self.separate_heads(f(x)) for f in (self.query_dense, self.key_dense, self.value_dense))
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(k.shape[-1]), dim=-1)
        out = torch.matmul(weights, v).permute(0, 2, 1, 3)
        return self.combine_heads(out.reshape(x.shape[0], -1, x.shape[2]))


class KwtBlock(nn.Module):
    """Post-norm, as the paper's default: LN(x + attention(x)), then LN(x + MLP(x)), eps 1e-6."""

    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.att = KwtAttention(dim, heads)
        self.ffn = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))
        self.layernorm1, self.layernorm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.dropout1, self.dropout2 = nn.Dropout(0.1), nn.Dropout(0.1)

    def forward(self, x):
        x = self.layernorm1(x + self.dropout1(self.att(x)))
        return self.layernorm2(x + self.dropout2(self.ffn(x)))


class KeywordTransformer(nn.Module):
    """KWT (Berg et al. 2021) over time: MFCC frames (B, 98, 40), each projected to D, a class
    token before them, learned positions, post-norm blocks, the class token's classifier.
    KWT-1: D 64, 12 layers, 1 head, MLP 256, 12 classes (607,308 parameters)."""

    def __init__(self, frames=98, coefficients=40, dim=64, layers=12, heads=1, mlp_dim=256, classes=12):
        super().__init__()
        self.patch_proj = nn.Linear(coefficients, dim)
        self.class_emb = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_emb = nn.Parameter(torch.randn(1, frames + 1, dim) * 0.02)
        self.enc_layers = nn.ModuleList([KwtBlock(dim, heads, mlp_dim) for _ in range(layers)])
        self.mlp_head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_proj(x)
        x = torch.cat([self.class_emb.expand(x.shape[0], 1, -1), x], dim=1) + self.pos_emb
        for layer in self.enc_layers:
            x = layer(x)
        return self.mlp_head(x[:, 0])


class PaddedBert(SmallBert):
    """BERT as it takes a batch of sequences of different lengths: an attention_mask (B, N), 1 for a
    token and 0 for padding, made an additive mask (1 - m) * -10000 broadcast over heads and queries
    and added to every layer's scores; BERT's pooler (a Linear and tanh on the first token) before
    the classifier."""

    def __init__(self, dim=32):
        super().__init__(dim=dim)
        self.pooler = nn.Linear(dim, dim)

    def forward(self, ids, attention_mask):
        extended = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        positions = torch.arange(ids.shape[1])
        x = self.norm(self.word_embeddings(ids) + self.position_embeddings(positions))
        for layer in self.layers:
            x = layer(x, extended)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


class PaddedAttention(nn.Module):
    """Written out, nanoGPT's way, with a padding mask: masked_fill where the mask says padding."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, padding):
        b, n, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(padding[:, None, None, :], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, n, d))


class Padded(nn.Module):
    """A padding mask (B, N), True where a sequence is padded (PyTorch's key_padding_mask), given to
    nn.MultiheadAttention, to attention written out, and to an nn.TransformerEncoder (whose fast
    path in eval writes 0 in the padded rows: only the rows that exist are compared); a class
    token before the rows, which the mask extends as a row that exists (KWT's and ViT's way)."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.inp = nn.Linear(6, dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.written = PaddedAttention(dim, heads)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, heads, 32, batch_first=True, dropout=0.0), 1)
        self.out = nn.Linear(dim, 4)

    def forward(self, x, padding):
        x = self.inp(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        padding = torch.cat([padding.new_zeros(padding.shape[0], 1), padding], dim=1)
        h = self.norm(x)
        x = x + self.attn(h, h, h, key_padding_mask=padding, need_weights=False)[0]
        x = x + self.written(x, padding)
        return self.out(self.encoder(x, src_key_padding_mask=padding))


class PaddedMean(nn.Module):
    """An encoder layer under PyTorch's key_padding_mask, then the mean of the rows that exist, as
    a sentence embedding is pooled: (x * m).sum(1) / m.sum(1), m 1 for a token."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.inp = nn.Linear(6, dim)
        self.layer = nn.TransformerEncoderLayer(dim, heads, 32, batch_first=True, dropout=0.0, norm_first=True)
        self.out = nn.Linear(dim, 3)

    def forward(self, x, padding):
        x = self.layer(self.inp(x), src_key_padding_mask=padding)
        m = (~padding).unsqueeze(-1).float()
        return self.out((x * m).sum(dim=1) / m.sum(dim=1))


class CrossAttention(nn.Module):
    """The queries from the rows, the keys and values from an encoder's output (one Linear packs them), einsum."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim)
        self.to_kv = nn.Linear(dim, 2 * dim)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, context):
        b, n, d = x.shape
        h = self.heads
        q = self.to_q(x).view(b, n, h, d // h)
        k, v = self.to_kv(context).chunk(2, dim=-1)
        k, v = (t.view(b, context.shape[1], h, d // h) for t in (k, v))
        scores = torch.einsum("bnhd,bmhd->bhnm", q, k) / math.sqrt(d // h)
        o = torch.einsum("bhnm,bmhd->bnhd", scores.softmax(dim=-1), v)
        return self.to_out(o.reshape(b, n, d))


class Seq2SeqLayer(nn.Module):
    """A pre-norm decoder layer: causal self-attention (nanoGPT's), attention over the encoder's
    output through its own norm, a feed-forward layer."""

    def __init__(self, dim, heads, length):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, length)
        self.ln_2 = nn.LayerNorm(dim)
        self.ln_context = nn.LayerNorm(dim)
        self.cross = CrossAttention(dim, heads)
        self.ln_3 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, context):
        x = x + self.attn(self.ln_1(x))
        x = x + self.cross(self.ln_2(x), self.ln_context(context))
        return x + self.mlp(self.ln_3(x))


class Seq2SeqDecoder(nn.Module):
    """A decoder's stack over an encoder's output (the memory): two layers written out, then
    nn.MultiheadAttention reading the memory as it is, post-norm, and a final norm."""

    def __init__(self, dim=16, heads=2, length=8):
        super().__init__()
        self.layers = nn.ModuleList([Seq2SeqLayer(dim, heads, length) for _ in range(2)])
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm_attn = nn.LayerNorm(dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, memory):
        for layer in self.layers:
            x = layer(x, memory)
        x = self.norm_attn(x + self.attn(x, memory, memory, need_weights=False)[0])
        return self.norm(x)


def rotation_table(head_width, length, base):
    """cos and sin of position·base^(−2i/head_width), [length, head_width / 2] each."""
    freqs = base ** (-torch.arange(0, head_width, 2).float() / head_width)
    angles = torch.outer(torch.arange(length).float(), freqs)
    return angles.cos(), angles.sin()


class PairsRotaryAttention(nn.Module):
    """llama2.c's style: wq, wk, wv bias-free, n_kv_heads < n_heads, the features of a head taken
    as complex pairs (2i, 2i + 1) and turned by a table in buffers, key/value heads repeated by
    expand and reshape, an additive causal buffer."""

    def __init__(self, dim, heads, kv_heads, length):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        cos, sin = rotation_table(self.head_dim, length, 10000.0)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", torch.full((1, 1, length, length), float("-inf")).triu(1))

    def turn(self, t, n):
        re, im = t.float().reshape(*t.shape[:-1], -1, 2).unbind(-1)
        cos, sin = self.cos[:n].view(1, n, 1, -1), self.sin[:n].view(1, n, 1, -1)
        return torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1).flatten(3).type_as(t)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.heads, self.head_dim)
        k = self.wk(x).view(b, n, self.kv_heads, self.head_dim)
        v = self.wv(x).view(b, n, self.kv_heads, self.head_dim)
        q, k = self.turn(q, n), self.turn(k, n)
        repeat = self.heads // self.kv_heads
        k, v = (t[:, :, :, None, :].expand(b, n, self.kv_heads, repeat, self.head_dim).reshape(b, n, self.heads, self.head_dim) for t in (k, v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim) + self.mask[:, :, :n, :n]
        out = torch.matmul(F.softmax(scores.float(), dim=-1).type_as(q), v)
        return self.wo(out.transpose(1, 2).contiguous().view(b, n, -1))


class HalvesRotaryAttention(nn.Module):
    """GPT-NeoX's and Hugging Face's style: q, k, v with biases, one key/value head for all (multi-query),
    rotate_half on (i, i + Dh/2) with a table [L, Dh] of repeated angles, Θ 500000, masked_fill."""

    def __init__(self, dim, heads, length):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, self.head_dim)
        self.v_proj = nn.Linear(dim, self.head_dim)
        self.o_proj = nn.Linear(dim, dim)
        cos, sin = rotation_table(self.head_dim, length, 500000.0)
        self.register_buffer("cos_cached", torch.cat([cos, cos], dim=-1), persistent=False)
        self.register_buffer("sin_cached", torch.cat([sin, sin], dim=-1), persistent=False)
        self.register_buffer("causal", torch.tril(torch.ones(length, length, dtype=torch.bool)))

    @staticmethod
    def rotate_half(t):
        first, second = t.chunk(2, dim=-1)
        return torch.cat((-second, first), dim=-1)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, 1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, 1, self.head_dim).transpose(1, 2)
        cos, sin = self.cos_cached[:n], self.sin_cached[:n]
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        k, v = k.expand(b, self.heads, n, self.head_dim), v.expand(b, self.heads, n, self.head_dim)
        scores = (q @ k.transpose(-1, -2)) * self.head_dim ** -0.5
        scores = scores.masked_fill(~self.causal[:n, :n], float("-inf"))
        return self.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, -1))


class RotaryBlock(nn.Module):
    def __init__(self, attention, dim, hidden):
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(dim, eps=1e-5), RMSNorm(dim, eps=1e-5)
        self.attention = attention
        self.feed_forward = SwiGLU(dim, hidden)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class RotaryLlama(nn.Module):
    """llama2.c's Transformer in outline: tied token embeddings and output, pre-norm blocks of
    rotary grouped-query attention and SwiGLU, a final RMSNorm; at inference the logits of the last
    position alone (h[:, [-1], :]). halves: the blocks' attention in GPT-NeoX's form instead."""

    def __init__(self, vocabulary=64, dim=32, heads=4, kv_heads=2, layers=2, length=16, halves=False):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocabulary, dim)
        attention = (lambda: HalvesRotaryAttention(dim, heads, length)) if halves else (lambda: PairsRotaryAttention(dim, heads, kv_heads, length))
        self.layers = nn.ModuleList([RotaryBlock(attention(), dim, 48) for _ in range(layers)])
        self.norm = RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocabulary, bias=False)
        self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens, last=True):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        return self.output(h[:, [-1], :] if last else h)
