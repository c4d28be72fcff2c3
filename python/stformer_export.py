"""stformer_export: a PyTorch model built from PyTorch's standard layers, as an stformer model.

    import stformer_export as sx
    model = nn.Sequential(nn.Linear(8, 32), sx.PositionEmbedding(32, 32),
                          nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, activation="gelu",
                                                                           batch_first=True), 2),
                          sx.MeanPool(), nn.Linear(32, 5))
    ...                                                  # train as usual
    sx.export(model, (1, 32, 8), "classifier", "out")   # out/classifier.hpp, out/classifier.safetensors

classifier.hpp declares the model's type, `using classifier = stformer::Sequential<...>;`, and
classifier.safetensors holds its state_dict under PyTorch's names, so that

    #include "classifier.hpp"
    #include <stformer/io/checkpoint.hpp>                   // load_params (links stformer_io)
    auto model = std::make_unique<classifier>();
    stformer::load_params("out/classifier.safetensors", *model);
    stformer::InferOf<classifier, 1, 32> pass;
    const auto& y = pass.forward(*model, x);             // x: stformer::Tensor<1, 32, 8>

computes what model(x) computes in eval mode.

The model is read as a chain: an nn.Sequential (or an nn.ModuleList, read as its modules applied
in order) of these modules, nested to any depth:

    nn.Linear                       Linear<In, Out> (bias=False: Linear<In, Out, Init::xavier_normal, Bias::no>)
    nn.LayerNorm(D)                 LayerNorm<D> (elementwise_affine, eps 1e-5)
    nn.ReLU, nn.GELU, nn.SiLU       ReLU<D>, GELU<D> (approximate='tanh': GELUTanh<D>), SiLU<D>
    nn.Tanh                         Tanh<D>
    nn.Dropout, nn.Identity         nothing (eval mode)
    nn.Embedding(V, D)              Embedding<V, D>, first only: the input is token ids (B, N)
    nn.TransformerEncoderLayer      EncoderBlock<D, H, F, PostNorm<A>> (norm_first: PreNorm<A>), batch_first=True,
                                    activation relu, gelu, or an nn.ReLU/GELU/SiLU module
    nn.TransformerEncoder           its layers as Repeat<EncoderBlock<...>, n>, and its norm (a LayerNorm)
    nn.TransformerDecoder(Layer)    the model itself only, with memory_shape: TransformerDecoder<DecoderBlock<...>, n, norm>
                                    (a lone layer DecoderBlock<D, H, F, PostNorm<A>>), computing module(x, m, tgt_mask=causal)
    PositionEmbedding(L, D)         PositionEmbedding<L, D>: x + weight[:N]            (this module's)
    ClassToken(D)                   ClassToken<D>: a learned row before the others    (this module's)
    MeanPool()                      MeanPool<D>: the rows' mean, (B, N, D) -> (B, 1, D) (this module's)
    FirstToken()                    FirstToken<D>: the first row, (B, N, D) -> (B, 1, D) (this module's)

Anything else is refused by its class and its path in the module tree, every such module listed
at once (ExportError); a module class of one's own is refused too, since its forward is not
read: write the model as an nn.Sequential of the modules above.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stformer_torch import save_safetensors  # noqa: E402
from stformer_declaration import declaration  # noqa: E402


# The poolings, heads and tokens stformer has and PyTorch has not as modules.
class PositionEmbedding(nn.Module):
    """Learned positions: y[:, n] = x[:, n] + weight[n] for n < N <= L (weight [L, D], N(0, 1))."""

    def __init__(self, length, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(length, d))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class ClassToken(nn.Module):
    """A learned row before the others: (B, N, D) -> (B, N + 1, D), row 0 = cls_token [1, 1, D]."""

    def __init__(self, d):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))

    def forward(self, x):
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


class MeanPool(nn.Module):
    """The mean of the rows: (B, N, D) -> (B, 1, D)."""

    def forward(self, x):
        return x.mean(dim=1, keepdim=True)


class FirstToken(nn.Module):
    """The first row (a class token's output): (B, N, D) -> (B, 1, D)."""

    def forward(self, x):
        return x[:, :1]


class ExportError(ValueError):
    """A model stformer cannot run as it stands: every reason, one per line."""


_ACTS = {"ReLU": "act::ReLU", "GELU": "act::GELU", "GELUTanh": "act::GELUTanh", "SiLU": "act::SiLU"}  # a feed-forward layer's


def _activation_name(a):
    """relu, gelu (either form), silu, tanh as a function, a string or a module; None otherwise."""
    if isinstance(a, str):
        return {"relu": "ReLU", "gelu": "GELU"}.get(a)
    if isinstance(a, nn.ReLU) or a is torch.nn.functional.relu:
        return "ReLU"
    if isinstance(a, nn.GELU):
        return "GELUTanh" if a.approximate == "tanh" else "GELU"
    if a is torch.nn.functional.gelu:
        return "GELU"
    if isinstance(a, nn.SiLU) or a is torch.nn.functional.silu:
        return "SiLU"
    if isinstance(a, nn.Tanh) or a is torch.tanh or a is torch.nn.functional.tanh:
        return "Tanh"
    return None


class _Chain:
    """The steps found so far: (PyTorch path, stformer type, what it is) and the stream's shape."""

    def __init__(self, input_shape):
        self.steps, self.errors = [], []
        self.seq_first = False  # a traced sequence-first model's layers: batch_first=False
        self.ids = len(input_shape) == 2  # token ids (B, N) until an Embedding
        self.vocabulary = None  # the Embedding's, for token ids
        self.batch, self.tokens = input_shape[0], input_shape[1]
        self.width = None if self.ids else input_shape[2]

    def fail(self, path, module, why):
        self.errors.append(f"'{path or '(the model)'}' ({type(module).__name__}): {why}")

    def add(self, path, cpp, what):
        self.steps.append((path, cpp, what))

    def rows(self, path, module, width=None):
        """The stream is rows [B, N, D] here (and D = width when given); False after an error."""
        if self.ids:
            self.fail(path, module, "takes rows [B, N, D], but the input is token ids [B, N]: an nn.Embedding comes first")
            return False
        if width is not None and width != self.width:
            self.fail(path, module, f"takes rows of width {width}, but the step before gives width {self.width}")
            self.width = None  # unknown from here on: no more width errors that follow from this one
            return False
        return True


def _layer_problems(layer, attentions, norms, seq_first=False):
    """Why an nn.TransformerEncoderLayer or nn.TransformerDecoderLayer cannot be read, if it cannot
    (seq_first: a traced model whose rows are (N, B, D) throughout)."""
    problems = []
    if attentions[0].batch_first == seq_first:
        problems.append(f"batch_first={attentions[0].batch_first} in a model whose other attention is batch_first={not seq_first}" if seq_first else
                        "batch_first=False: stformer's rows are [B, N, D], construct it with batch_first=True")
    for attn in attentions:
        if not attn._qkv_same_embed_dim or attn.bias_k is not None or attn.add_zero_attn:
            problems.append("its attention has kdim/vdim, add_bias_kv or add_zero_attn, which stformer has not")
        if attn.in_proj_bias is None:
            problems.append("its attention has no bias, which stformer's packed attention needs")
    if any(n.eps != 1e-5 for n in norms):
        problems.append(f"layer_norm_eps={norms[0].eps}: stformer's LayerNorm has PyTorch's default, 1e-5")
    if _activation_name(layer.activation) not in _ACTS:
        problems.append(f"activation {getattr(layer.activation, '__name__', type(layer.activation).__name__)} is not relu, gelu or silu")
    return problems


def _encoder_layer(chain, path, layer):
    """nn.TransformerEncoderLayer as EncoderBlock<D, H, F, Form>, or None with the reasons in chain."""
    return _layer(chain, path, layer, "EncoderBlock", [layer.self_attn], [layer.norm1, layer.norm2])


def _decoder_layer(chain, path, layer):
    """nn.TransformerDecoderLayer as DecoderBlock<D, H, F, Form>, or None with the reasons in chain."""
    return _layer(chain, path, layer, "DecoderBlock", [layer.self_attn, layer.multihead_attn], [layer.norm1, layer.norm2, layer.norm3])


def _layer(chain, path, layer, block, attentions, norms):
    d, h, f = attentions[0].embed_dim, attentions[0].num_heads, layer.linear1.out_features
    problems = _layer_problems(layer, attentions, norms, chain.seq_first)
    for p in problems:
        chain.fail(path, layer, p)
    if problems or not chain.rows(path, layer, d):
        return None
    form = "PreNorm" if layer.norm_first else "PostNorm"
    return f"stformer::{block}<{d}, {h}, {f}, stformer::{form}<stformer::{_ACTS[_activation_name(layer.activation)]}>>"


def _layer_norm(chain, path, m):
    problems = []
    if len(m.normalized_shape) != 1 or not m.elementwise_affine:
        problems.append("stformer's LayerNorm normalises the last dimension, with weight and bias")
    if m.eps != 1e-5:
        problems.append(f"eps={m.eps}: stformer's LayerNorm has PyTorch's default, 1e-5")
    for p in problems:
        chain.fail(path, m, p)
    if problems or not chain.rows(path, m, m.normalized_shape[0]):
        return None
    return f"stformer::LayerNorm<{m.normalized_shape[0]}>"


_SUPPORTED = (nn.Sequential, nn.ModuleList, nn.Dropout, nn.Identity, nn.Linear, nn.LayerNorm, nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh,
              nn.Embedding, nn.TransformerEncoderLayer, nn.TransformerEncoder, PositionEmbedding, ClassToken, MeanPool, FirstToken)


def _forward(m, x):
    """m(x), a ModuleList (which has no forward of its own) as its modules in order."""
    if isinstance(m, (nn.Sequential, nn.ModuleList)):
        for child in m.children():
            x = _forward(child, x)
        return x
    return m(x)


def _walk(chain, path, m):
    """Appends module m (at path) to the chain, or its reasons to chain.errors."""
    at = (lambda name: f"{path}.{name}" if path else name)
    base = next((c for c in _SUPPORTED if isinstance(m, c)), None)
    if base is not None and type(m) is not base and getattr(type(m), "forward", None) is not getattr(base, "forward", None):
        chain.fail(path, m, f"a subclass of {base.__name__} with a forward of its own, which is not read: "
                            "write the model as an nn.Sequential of supported modules")
    elif isinstance(m, (nn.Sequential, nn.ModuleList)):
        for name, child in m.named_children():
            _walk(chain, at(name), child)
    elif isinstance(m, (nn.Dropout, nn.Identity)):
        pass
    elif isinstance(m, nn.Linear):
        if chain.rows(path, m, m.in_features):
            bias = "" if m.bias is not None else ", stformer::Init::xavier_normal, stformer::Bias::no"
            chain.add(path, f"stformer::Linear<{m.in_features}, {m.out_features}{bias}>", f"nn.Linear({m.in_features}, {m.out_features})")
            chain.width = m.out_features
    elif isinstance(m, nn.LayerNorm):
        cpp = _layer_norm(chain, path, m)
        if cpp:
            chain.add(path, cpp, f"nn.LayerNorm({chain.width})")
    elif _activation_name(m) is not None and isinstance(m, nn.Module):
        if chain.rows(path, m):
            chain.add(path, f"stformer::{_activation_name(m)}<{chain.width}>", f"nn.{type(m).__name__}")
    elif isinstance(m, nn.Embedding):
        if not chain.ids:
            chain.fail(path, m, "an nn.Embedding takes token ids: it can only be the first step")
        elif m.max_norm is not None:
            chain.fail(path, m, "max_norm renormalises rows as it looks them up, which stformer does not")
        else:
            chain.add(path, f"stformer::Embedding<{m.num_embeddings}, {m.embedding_dim}>", f"nn.Embedding({m.num_embeddings}, {m.embedding_dim})")
            chain.ids, chain.width, chain.vocabulary = False, m.embedding_dim, m.num_embeddings
    elif isinstance(m, nn.TransformerEncoderLayer):
        cpp = _encoder_layer(chain, path, m)
        if cpp:
            chain.add(path, cpp, "nn.TransformerEncoderLayer")
    elif isinstance(m, nn.TransformerEncoder):
        blocks = [_encoder_layer(chain, at(f"layers.{i}"), layer) for i, layer in enumerate(m.layers)]
        if all(blocks):
            if len(set(blocks)) != 1:
                chain.fail(path, m, "its layers differ in shape or form: stformer repeats one block")
            else:
                chain.add(at("layers"), f"stformer::Repeat<{blocks[0]}, {len(blocks)}>", f"nn.TransformerEncoder, {len(blocks)} layers")
        if m.norm is not None:
            if isinstance(m.norm, nn.LayerNorm):
                cpp = _layer_norm(chain, at("norm"), m.norm)
                if cpp:
                    chain.add(at("norm"), cpp, "its final nn.LayerNorm")
            else:
                chain.fail(at("norm"), m.norm, "an encoder's final norm must be an nn.LayerNorm")
    elif isinstance(m, PositionEmbedding):
        length, d = m.weight.shape
        if chain.rows(path, m, d):
            if chain.tokens > length:
                chain.fail(path, m, f"{chain.tokens} rows, but positions for {length} only")
            chain.add(path, f"stformer::PositionEmbedding<{length}, {d}>", f"PositionEmbedding({length}, {d})")
    elif isinstance(m, ClassToken):
        d = m.cls_token.shape[-1]
        if chain.rows(path, m, d):
            chain.add(path, f"stformer::ClassToken<{d}>", f"ClassToken({d})")
            chain.tokens += 1
    elif isinstance(m, (MeanPool, FirstToken)):
        if chain.rows(path, m):
            chain.add(path, f"stformer::{type(m).__name__}<{chain.width}>", f"{type(m).__name__}()")
            chain.tokens = 1
    elif isinstance(m, nn.MultiheadAttention):
        chain.fail(path, m, "attention takes queries, keys and values, not one stream: "
                            "use nn.TransformerEncoderLayer, or stformer's MultiHeadAttention<..., Projections::packed> in C++")
    elif type(m).__module__.startswith("torch.nn"):
        chain.fail(path, m, "not a module stformer_export supports (see its documentation)")
    else:
        chain.fail(path, m, "a module of your own: its forward is not read; "
                            "write the model as an nn.Sequential of supported modules")


def plan(module, input_shape):
    """The chain stformer_export reads in module: [(PyTorch path, stformer type, what)] and the
    output's shape; raises ExportError listing every module it cannot take."""
    chain = _read(module, input_shape)
    return chain.steps, (chain.batch, chain.tokens, chain.width)


def _read(module, input_shape):
    if len(input_shape) not in (2, 3):
        raise ExportError(f"input_shape {tuple(input_shape)}: (B, N, In) for rows, (B, N) for token ids")
    chain = _Chain(tuple(int(s) for s in input_shape))
    _walk(chain, "", module)
    if chain.errors:
        raise ExportError("stformer_export: the model cannot be exported as it stands:\n  " + "\n  ".join(chain.errors))
    if not chain.steps:
        raise ExportError("stformer_export: the model has no step stformer computes (only Dropout or Identity)")
    if chain.ids:
        raise ExportError("stformer_export: the input is token ids, but the model does not start with an nn.Embedding")
    _check_finite(module)
    return chain


def _check_finite(module):
    bad = [k for k, v in module.named_parameters() if not torch.isfinite(v).all()]
    if bad:
        raise ExportError("stformer_export: parameters hold a NaN or an infinity: " + ", ".join(bad))


def _cpp_string(path):
    if any(c in path for c in '"\\'):
        raise ExportError(f"stformer_export: the module path {path!r} has a quote or a backslash")
    return path


def _decoder(module, input_shape, memory_shape):
    """An nn.TransformerDecoder or nn.TransformerDecoderLayer as stformer's type, or ExportError."""
    chain = _Chain(tuple(int(s) for s in input_shape))
    if len(input_shape) != 3 or memory_shape is None or len(memory_shape) != 3 or memory_shape[0] != input_shape[0] \
            or memory_shape[2] != input_shape[2]:
        raise ExportError(f"stformer_export: a decoder takes rows (B, N, D) and a memory (B, M, D): input_shape {tuple(input_shape)}, "
                          f"memory_shape {memory_shape}")
    if isinstance(module, nn.TransformerDecoderLayer):
        cpp = _decoder_layer(chain, "", module)
    else:
        layers = [_decoder_layer(chain, f"layers.{i}", layer) for i, layer in enumerate(module.layers)]
        cpp = None
        if all(layers) and len(set(layers)) != 1:
            chain.fail("", module, "its layers differ in shape or form: stformer repeats one block")
        norm = "void"
        if module.norm is not None:
            norm = _layer_norm(chain, "norm", module.norm) if isinstance(module.norm, nn.LayerNorm) else None
            if not isinstance(module.norm, nn.LayerNorm):
                chain.fail("norm", module.norm, "a decoder's final norm must be an nn.LayerNorm")
        if all(layers) and norm and not chain.errors:
            cpp = f"stformer::TransformerDecoder<{layers[0]}, {len(layers)}, {norm}>"
    if chain.errors:
        raise ExportError("stformer_export: the model cannot be exported as it stands:\n  " + "\n  ".join(chain.errors))
    _check_finite(module)
    return cpp


def _known(path, m, x, node, build):
    """The leaves of a PyTorch module the trace keeps whole (stformer_trace), called on rows x;
    None, with the reason recorded, for one stformer does not read."""
    import stformer_trace as st
    state = {k: v.detach().float() for k, v in m.state_dict().items()}
    if x is None:
        return build.fail(node, "a module applied to no tensor computed from the input")
    if isinstance(m, nn.Linear):
        bias = "" if m.bias is not None else ", stformer::Init::xavier_normal, stformer::Bias::no"
        return st.Leaf(path, f"stformer::Linear<{m.in_features}, {m.out_features}{bias}>", f"nn.Linear({m.in_features}, {m.out_features})",
                       m, state)
    if isinstance(m, nn.LayerNorm):
        if len(m.normalized_shape) != 1 or not m.elementwise_affine:
            return build.fail(node, "stformer's LayerNorm normalises the last dimension, with a weight")
        w = m.weight.detach()
        b = m.bias.detach() if m.bias is not None else torch.zeros_like(w)
        return build.norm_leaf(path, w, b, m.eps)
    kind = _activation_name(m)
    if kind is not None:
        return st.Leaf(path, f"stformer::{kind}<{x.shape[-1]}>", f"nn.{type(m).__name__}", m)
    if isinstance(m, nn.Embedding):
        if x.dtype not in (torch.int64, torch.int32) or node.args[0].op != "placeholder":
            return build.fail(node, "an nn.Embedding is read on the model's token ids, as its first step")
        if m.max_norm is not None:
            return build.fail(node, "max_norm renormalises rows as it looks them up, which stformer does not")
        return st.Leaf(path, f"stformer::Embedding<{m.num_embeddings}, {m.embedding_dim}>",
                       f"nn.Embedding({m.num_embeddings}, {m.embedding_dim})", m, state)
    if isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerEncoder, PositionEmbedding, ClassToken, MeanPool, FirstToken)):
        mask = node.kwargs.get("src_mask", node.kwargs.get("mask", node.args[1] if len(node.args) > 1 else None))
        causal = False
        if mask is not None:
            value = build.r.const(mask)
            causal = st._causal_mask_value(value, x.shape[0] if build.seq_first else x.shape[1])
            if mask in build.dep or not causal:
                return build.fail(node, "a mask that is not the causal one")
        keys, kpm = None, node.kwargs.get("src_key_padding_mask", node.args[2] if len(node.args) > 2 else None)
        if kpm is not None:
            keys = build.key_padding_mask(node, kpm)
            if keys is None:
                return None
            kpm = build.r.const(kpm)
        elif build.key_readings and isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerEncoder)):
            return build.fail(node, build.UNMASKED)
        chain = _Chain(tuple(x.transpose(0, 1).shape) if build.seq_first else tuple(x.shape))
        chain.seq_first = build.seq_first
        _walk(chain, path, m)
        for e in chain.errors:
            build.fail(node, e)
        if chain.errors:
            return None
        causal_mask = value if causal else None
        if build.seq_first:  # computed on stformer's rows (B, N, D): the module's are (N, B, D)
            def run(y):
                return m(y.transpose(0, 1), causal_mask, src_key_padding_mask=kpm).transpose(0, 1)
        else:
            def run(y):
                return m(y, causal_mask, src_key_padding_mask=kpm) if causal or keys is not None else m(y)
        attends = isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerEncoder))
        return [st.Leaf(p, t, what, run if i == 0 else (lambda y: y), state if i == 0 else {}, causal, prefix=path, attends=attends and i == 0)
                for i, (p, t, what) in enumerate(chain.steps)]
    return build.fail(node, f"{type(m).__name__} is not a module stformer_export reads (see docs/pytorch.md)")


_TRACED_WHOLE = (nn.Linear, nn.LayerNorm, nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Dropout, nn.Identity, nn.Embedding, nn.MultiheadAttention,
                 nn.TransformerEncoderLayer, nn.TransformerEncoder, PositionEmbedding, ClassToken, MeanPool, FirstToken)


def _chain_reads(module):
    """Whether module is a chain of the modules the chain reader takes (nn.Sequential, nn.ModuleList or one of them)."""
    if isinstance(module, (nn.Sequential, nn.ModuleList)):
        return all(_chain_reads(c) for c in module.children()) and type(module) in (nn.Sequential, nn.ModuleList)
    return isinstance(module, _SUPPORTED) and type(module).forward is next(c for c in _SUPPORTED if isinstance(module, c)).forward


def _sequence_first(module, batch_first):
    """Whether a traced model's rows are (N, B, D): its attention modules' batch_first=False, or told."""
    firsts = {m.batch_first for m in module.modules() if isinstance(m, nn.MultiheadAttention)}
    if batch_first is not None:
        return not batch_first
    if len(firsts) > 1:
        raise ExportError("stformer_export: some attention modules are batch_first=True and some False: "
                          "the model's rows have one layout")
    return firsts == {False}


def _export_traced(module, example, name, folder, causal, batch_first=None, key_padding=False, memory=None):
    """A module with its own forward: traced (stformer_trace), checked, written. memory: the forward's
    second input, a memory its cross-attentions read."""
    import stformer_trace as st
    main = example[0] if isinstance(example, tuple) else example
    if not torch.is_tensor(main):
        raise ExportError("stformer_export: a module with a forward of its own is traced: give an example input tensor, "
                          "not a shape")
    if memory is not None:
        if isinstance(example, tuple) or key_padding:
            raise ExportError("stformer_export: memory=: the forward takes the rows and the memory alone (no mask)")
        if not torch.is_tensor(memory) or not memory.is_floating_point():
            raise ExportError("stformer_export: memory=: a tensor of floats, the memory's rows (B, M, D)")
        example = (example, memory)
    _check_finite(module)
    seq_first = _sequence_first(module, batch_first)
    rows = (lambda t: t.transpose(0, 1)) if seq_first else (lambda t: t)  # PyTorch's layout -> stformer's (B, N, ...)
    image = main.dim() == 4  # (B, C, H, W): stformer's input is its C·H rows of W pixels, the same bytes
    rows_in = (lambda t: t.reshape(t.shape[0], t.shape[1] * t.shape[2], t.shape[3])) if image else rows
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            chain, out_shape, got, keys = st.read(module, example, _TRACED_WHOLE, _known, seq_first, key_padding, memory is not None)
            if seq_first and got.dim() == 3:
                got = rows(got)
            mine = chain(rows_in(main))
    except st.TraceError as e:
        raise ExportError(str(e)) from None
    finally:
        module.train(was_training)
    masks = {leaf.causal for leaf in chain.leaves() if leaf.attends and not isinstance(leaf, st.CrossLeaf)}
    if len(masks) > 1:
        raise ExportError("stformer_export: some attentions are causal and some are not: stformer declares a model causal or not")
    is_causal = masks == {True}
    if causal is not None and causal != is_causal:
        raise ExportError(f"stformer_export: causal={causal}, but the model's attention is {'causal' if is_causal else 'not causal'}")
    theirs = got
    if keys is not None and mine.dim() == 3 and mine.shape[1] >= keys.shape[1]:  # rows of the input's (and class tokens'): those that
        exist = st.with_tokens(keys, mine.shape[1])  # exist alone are compared (PyTorch's own may write anything, or 0, in the others)
        mine, theirs = mine[exist], got.reshape(mine.shape)[exist]
    if not st._close(mine, theirs, 1e-4):
        raise ExportError("stformer_export: the steps read from the forward do not compute what the module computes "
                          f"(largest difference {float((mine.reshape(-1) - theirs.reshape(-1)).abs().max()):.3g}): not exported")
    seen = {}
    for leaf in chain.leaves():
        if leaf.state and id(leaf) in seen:
            raise ExportError(f"stformer_export: the output of '{leaf.path}' is read by two branches that stformer cannot "
                              "share: it would be computed twice, with its parameters twice")
        seen[id(leaf)] = leaf
    state = {}
    for leaf in chain.leaves():
        for k, v in leaf.state.items():
            key = f"{leaf.prefix}.{k}" if leaf.prefix else k
            if key in state and not torch.equal(state[key], v):
                raise ExportError(f"stformer_export: two steps would save different tensors as {key!r}")
            state[key] = v.detach().float().contiguous()
    steps = [(leaf.path, leaf.cpp, leaf.what) for leaf in chain.leaves()]
    if memory is not None:  # a model over a memory: WithMemory<causal, ...>, causal by its type
        if not any(isinstance(leaf, st.CrossLeaf) for leaf in chain.leaves()):
            raise ExportError("stformer_export: memory= is given, but no attention of the model reads the forward's second input")
        errors = st.memory_errors(chain.steps)
        if errors:
            raise ExportError("stformer_export: the model cannot be exported as it stands:\n  " + "\n  ".join(errors))
        if tuple(out_shape) != tuple(rows_in(main).shape):
            raise ExportError(f"stformer_export: a model over a memory gives rows of its input's shape {tuple(rows_in(main).shape)}, "
                              f"not {tuple(out_shape)}")
        flag = "true" if is_causal else "false"
        cpp = f"stformer::WithMemory<{flag},\n" + ",\n".join("    " + t for t in st.repeated(chain.steps, flag)) + ">"
        return _write(module, name, folder, cpp, steps, state, tuple(rows_in(main).shape), out_shape, rows_in(main).contiguous(), got, False,
                      memory_shape=tuple(rows(memory).shape), memory=rows(memory).contiguous(), seq_first=seq_first, traced=True)
    cpp = "stformer::Sequential<\n" + ",\n".join("    " + t for t in st.repeated(chain.steps)) + ">"
    return _write(module, name, folder, cpp, steps, state, tuple(rows_in(main).shape), out_shape, rows_in(main).contiguous(), got, is_causal,
                  seq_first=seq_first, image=tuple(main.shape[1:]) if image else None, keys=keys)


def export(module, example, name, folder, memory_shape=None, memory=None, causal=None, batch_first=None, key_padding=False):
    """Writes folder/name.hpp, which declares the model's type (`using name = stformer::Sequential<...>;`,
    or a struct of it declaring `causal = true` for a causal model), folder/name.safetensors, its
    parameters under the names that type reads, and folder/name.example.safetensors: the example
    `input` and the module's eval-mode `output` for it, to check the C++ side against. Returns
    the header's path.

    example: the input tensor (float rows (B, N, In), or int64 token ids (B, N)); its shape fixes
    the model's. A shape tuple is accepted for a chain of the modules listed above (random
    values are drawn, and no example file is written).
    A module with a forward of its own is traced (stformer_trace) and needs a tensor.
    causal: None (found from the graph), or True/False, which must agree with what is found.
    key_padding: the forward's second input is a key mask over the input's rows, (B, N): example =
    (input, mask), a mask with padding in it. Its attention hides the padded rows' keys (an additive
    mask made from it, masked_fill, nn.MultiheadAttention's key_padding_mask, a TransformerEncoder's
    src_key_padding_mask); stformer's pass takes it as Mask::keys (true: a row that exists, whichever
    way the model's mask says it), the C API as NAME_predict_keys; the example file holds it as `keys`.
    The outputs of the rows that exist are checked against PyTorch's.
    An nn.TransformerDecoder or nn.TransformerDecoderLayer takes two inputs: the rows (B, N, D)
    and the memory: its tensor (B, M, D) (saved as `memory`), or memory_shape; its header
    declares a TransformerDecoder or a DecoderBlock, which computes module(x, memory,
    tgt_mask=the causal mask). So does a module of your own whose forward(x, memory) has
    cross-attentions (nn.MultiheadAttention called with the memory as keys and values, or written
    out with its keys and values projected from the memory or a LayerNorm of it), each as
    x + attention(x, memory) or x + attention(norm(x), memory): memory= its example; its header
    declares a WithMemory<causal, ...> of residual blocks, CrossAttend and norms."""
    if not name.isidentifier():
        raise ExportError(f"stformer_export: name {name!r} is not a C++ identifier")
    if isinstance(example, tuple) and example and torch.is_tensor(example[0]):  # the input, then constant inputs (a mask)
        return _export_traced(module, example, name, folder, causal, batch_first, key_padding, memory)
    if key_padding:
        raise ExportError("stformer_export: key_padding=True: the example is (input, mask), the mask the forward's second input")
    if torch.is_tensor(example):
        example_input, input_shape = example, tuple(example.shape)
    else:
        example_input, input_shape = None, tuple(int(s) for s in example)
    if memory is not None and memory_shape is None:
        memory_shape = tuple(memory.shape)
    decoder = isinstance(module, (nn.TransformerDecoder, nn.TransformerDecoderLayer))
    if not decoder and not _chain_reads(module):
        if example_input is None:
            raise ExportError("stformer_export: a module with a forward of its own is traced: give an example input tensor, "
                              "not a shape")
        return _export_traced(module, example_input, name, folder, causal, batch_first, memory=memory)
    if not decoder and (memory is not None or memory_shape is not None):
        raise ExportError("stformer_export: a memory is given, but a chain of modules reads none (a decoder or a module of your own does)")
    if causal:
        raise ExportError("stformer_export: causal=True, but a chain of modules has no causal mask (a decoder's is its own)")
    if decoder:
        cpp = _decoder(module, input_shape, memory_shape)
        out_shape, steps = tuple(input_shape), [("", cpp, type(module).__name__)]
    else:
        chain = _read(module, input_shape)
        steps, out_shape = chain.steps, (chain.batch, chain.tokens, chain.width)
        cpp = "stformer::Sequential<\n" + ",\n".join(f'    stformer::Named<"{_cpp_string(p)}", {t}>' for p, t, _ in steps) + ">"
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            if decoder:
                probe = example_input if example_input is not None else torch.randn(*input_shape)
                mem = memory if memory is not None else torch.randn(*memory_shape)
                causal_mask = torch.triu(torch.full((input_shape[1], input_shape[1]), float("-inf")), 1)
                got = module(probe, mem, tgt_mask=causal_mask)
            else:
                probe = example_input if example_input is not None else (
                    torch.randint(0, chain.vocabulary, tuple(input_shape)) if len(input_shape) == 2 else torch.randn(*input_shape))
                got = _forward(module, probe)
    finally:
        module.train(was_training)
    if not torch.is_tensor(got) or tuple(got.shape) != out_shape:
        raise ExportError(f"stformer_export: the model's forward gives {tuple(got.shape) if torch.is_tensor(got) else type(got).__name__}, "
                          f"but its modules in order give {out_shape}: its forward is not the chain of its modules")
    state = {k: v.detach().float().contiguous() for k, v in module.state_dict().items()}
    return _write(module, name, folder, cpp, steps, state, input_shape, out_shape, example_input, got, False,
                  memory_shape=memory_shape if decoder else None, memory=mem if decoder else None)


def _write(module, name, folder, cpp, steps, state, input_shape, out_shape, example, got, causal, memory_shape=None, memory=None,
           seq_first=False, image=None, keys=None, traced=False):
    """The header, the parameters and (with an example) the example's input and output (traced: a
    module's own forward, over a memory when memory_shape is given)."""
    decoder = memory_shape is not None
    os.makedirs(folder, exist_ok=True)
    flat = cpp.replace("\n", "").replace("    ", " ")
    save_safetensors(os.path.join(folder, f"{name}.safetensors"), state,
                     {"stformer.type": flat, "stformer.declaration": declaration(cpp, causal), "stformer.causal": "true" if causal else "false",
                      "torch": torch.__version__})
    if example is not None:
        saved = {"input": example.int() if len(input_shape) == 2 else example.float(), "output": got.float().reshape(out_shape)}
        if decoder:
            saved["memory"] = memory.float()
        if keys is not None:
            saved["keys"] = keys.to(torch.uint8)
        save_safetensors(os.path.join(folder, f"{name}.example.safetensors"), saved)
    b, n = input_shape[0], input_shape[1]
    x_type = f"stformer::IdTensor<{b}, {n}>" if len(input_shape) == 2 else f"stformer::Tensor<{b}, {n}, {input_shape[2]}>"
    y_type = f"stformer::Tensor<{', '.join(map(str, out_shape))}>"
    if decoder:
        m = memory_shape[1]
        lines = [f"// {name}: written by python/stformer_export.py from a {type(module).__name__} (PyTorch {torch.__version__}).",
                 f"// Input {x_type} x and the memory stformer::Tensor<{b}, {m}, {input_shape[2]}> m, output {y_type}",
                 "// (PyTorch's module(x, m)" + (", sequence-first: its (N, B, D) are stformer's (B, N, D) transposed" if seq_first else "") + "):"
                 if traced else "// (PyTorch's module(x, m, tgt_mask=causal, memory_key_padding_mask=~keys)):",
                 f"//   auto model = std::make_unique<{name}>();              // load_params: <stformer/io/checkpoint.hpp>",
                 f'//   stformer::load_params("{name}.safetensors", *model);',
                 f"//   stformer::InferOf<{name}, {b}, {n}, {m}> pass;",
                 "//   const auto& y = pass.forward(*model, x, m);" + ("" if traced else
                                                                        "         // or (..., &keys): stformer::KeyMask<B, M>, true = a real row")]
        check = [f"static_assert(std::is_same_v<decltype(stformer::InferOf<{name}, {b}, {n}, {m}>::out), {y_type}>,",
                 f'              "{name}: the shapes PyTorch gave");', ""]
    else:
        lines = [f"// {name}: written by python/stformer_export.py from a {type(module).__name__} (PyTorch {torch.__version__}).",
                 f"// Input {x_type} x, output {y_type}" + (" (PyTorch's, reshaped to rows)" if got.dim() != 3 else "") + ":",
                 *(["// (PyTorch's model is sequence-first: its (N, B, ...) are stformer's (B, N, ...), transposed; one and the same",
                    "// for one sequence, B = 1)"] if seq_first else []),
                 *([f"// (the image (B, {image[0]}, {image[1]}, {image[2]}) as PyTorch holds it: its {image[0] * image[1]} rows of {image[2]} pixels)"]
                   if image else []),
                 f"//   auto model = std::make_unique<{name}>();              // load_params: <stformer/io/checkpoint.hpp>",
                 f'//   stformer::load_params("{name}.safetensors", *model);',
                 f"//   stformer::InferOf<{name}, {b}, {n}> pass;",
                 "//   const auto& y = pass.forward(*model, x);" + ("           // causal: the mask is the model's own" if causal else ""),
                 *([f"//   const auto& y = pass.forward(*model, x, stformer::Mask<{b}, {n}>{{.keys = &keys}});  // keys: stformer::KeyMask<{b}, {n}>,",
                    "//                                        true for a row that exists (PyTorch's key_padding_mask: true for padding)"]
                   if keys is not None else [])]
        check = [f"static_assert(std::is_same_v<{name}::Input<{b}, {n}>, {x_type}> &&",
                 f"              std::is_same_v<{name}::Output<{b}, {n}>, {y_type}>,",
                 f'              "{name}: the shapes PyTorch gave");', ""]
    if not decoder:  # what src/stformer-c-api reads when its command line leaves it out
        lines += [f"// stformer-c-api: --type {name} --rows {n}" + (" --causal" if causal else "") + (" --keys" if keys is not None else "")]
    lines += ["// Its steps, by PyTorch's path:"]
    lines += [f"//   {p or '(the model)':<24} {what}" for p, _, what in steps]
    lines += ["#pragma once", "", "#include <type_traits>", "", "#include <stformer/stformer.hpp>", ""]
    if causal:
        lines += ["// Causal: row i of the output reads rows 0 .. i of the input alone; every pass applies the mask.",
                  f"struct {name} : {cpp} {{", "  static constexpr bool causal = true;", "};", ""]
    else:
        lines += [f"using {name} = {cpp};", ""]
    lines += check
    path = os.path.join(folder, f"{name}.hpp")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path
