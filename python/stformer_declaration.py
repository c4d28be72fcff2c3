"""A model's declaration as stformer writes it into a checkpoint's metadata ("stformer.declaration").

The C++ side states it from the model's type (include/stformer/core/declaration.hpp); the exporter
writes the same text from the C++ declaration it writes in the header, so that loading the file
into a model of another type is refused. The canonical form:

  - a template's name without namespaces, then every argument (defaults too) between < >,
    separated by "," with no spaces;
  - numbers in decimal, true/false, Enum::name, "strings", blocks by their own declaration,
    an epsilon as epsilon(x) (RoPE's base as theta(x)) with x the shortest %g that reads back
    as the same float32;
  - what does not change the function is left out (a Linear's initialisation, Patchify's
    element type, a Named<"", B> around B); what computes the same is written the same (SelfAttention<D, H> is
    MultiHeadAttention<D,D,D,H,...>, Activation<act::GELU, F> is GELU<F>);
  - composite blocks (EncoderBlock, DecoderBlock, TransformerDecoder, FeedForward) as the
    combinators they stand for; a causal block as Causal<...>.

    declaration("stformer::Sequential<stformer::Named<\"fc\", stformer::Linear<4, 2>>>")
        == 'Sequential<Named<"fc",Linear<4,2,Bias::yes>>>'
"""
import re
import struct

_TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)|'
                    r'([-+]?[0-9][0-9.]*(?:[eE][-+]?[0-9]+)?[fFuUlL]*)|([<>,()]))')


class DeclarationError(ValueError):
    """A C++ declaration this module cannot read."""


def _tokens(text):
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise DeclarationError(f"stformer_declaration: cannot read {text[pos:pos + 40]!r}")
        out.append(m.group(0).strip())
        pos = m.end()
    return out


def _parse(tokens, i=0):
    """(node, next index): a node is (name, [args]) for a template or a call, or (atom, None)."""
    head = tokens[i]
    i += 1
    if i < len(tokens) and tokens[i] in "<(":
        close = ">" if tokens[i] == "<" else ")"
        args = []
        i += 1
        while tokens[i] != close:
            node, i = _parse(tokens, i)
            args.append(node)
            if tokens[i] == ",":
                i += 1
        return (head, args, close), i + 1
    return (head, None, None), i


def _bare(name):
    return name[len("stformer::"):] if name.startswith("stformer::") else name


def shortest(x):
    """The shortest %g of x that reads back as the same float32 (C++'s decl::shortest)."""
    f = struct.unpack("f", struct.pack("f", x))[0]
    for digits in range(1, 10):
        s = "%.*g" % (digits, f)
        if struct.unpack("f", struct.pack("f", float(s)))[0] == f:
            return s
    return s


def _t(name, *args):
    return f"{name}<{','.join(args)}>"


def _named(name, block):
    return _t("Named", f'"{name}"', block) if name else block


def _mha(dq, dkv, d, h, scale="ScoreScale::head_width", projections="Projections::separate"):
    return _t("MultiHeadAttention", dq, dkv, d, h, scale, projections)


def _norm(norm, d):
    return {"ScaleNorm": lambda: _t("ScaleNorm", d), "LayerNorm": lambda: _t("LayerNorm", d, "epsilon(1e-05)"),
            "RMSNorm": lambda: _t("RMSNorm", d, "epsilon(1.1920929e-07)")}[norm]()


def _feed_forward(d, f, act, torch_names):
    first, second = ("linear1", "linear2") if torch_names else ("fc1", "fc2")
    return _t("Sequential", _named(first, _t("Linear", d, f, "Bias::yes")), _t(act, f), _named(second, _t("Linear", f, d, "Bias::yes")))


def _form(node):
    """(norm, activation, norm_first) of a Form node: SpecForm, PreNorm<Act>, PostNorm<Act>, Form<N, Act, first>."""
    name, args, _ = node
    name, args = _bare(name), args or []
    act = lambda i: _bare(args[i][0]).split("::")[-1] if len(args) > i else "ReLU"  # noqa: E731
    if name == "SpecForm":
        return "ScaleNorm", "ReLU", True
    if name in ("PreNorm", "PostNorm"):
        return "LayerNorm", act(0), name == "PreNorm"
    if name == "Form":
        norm = _bare(args[0][0]) if args else "ScaleNorm"
        return norm, act(1), (args[2][0] == "true") if len(args) > 2 else True
    raise DeclarationError(f"stformer_declaration: {name} is not a block's form")


def _encoder(d, h, f, form):
    norm, act, first = form
    torch_names = norm != "ScaleNorm"
    n1, n2 = (_named(n, _norm(norm, d)) for n in (("norm1", "norm2") if torch_names else ("sn1", "sn2")))
    mha = _named("self_attn", _mha(d, d, d, h, projections="Projections::packed")) if torch_names else _named("attn", _mha(d, d, d, h))
    ffn = _named("" if torch_names else "ffn", _feed_forward(d, f, act, torch_names))
    res = lambda b: _named("", _t("Residual", b))  # noqa: E731
    if first:
        return _t("Sequential", res(_t("Sequential", n1, mha)), res(_t("Sequential", n2, ffn)))
    return _t("Sequential", res(mha), n1, res(ffn), n2)


def _decoder(d, h, f, form):
    norm, act, first = form
    torch_names = norm != "ScaleNorm"
    pr = "Projections::packed" if torch_names else "Projections::separate"
    n1, n2, n3 = (_named(t if torch_names else s, _norm(norm, d)) for s, t in (("sn1", "norm1"), ("sn2", "norm2"), ("sn3", "norm3")))
    self_attn = _named("self_attn", _mha(d, d, d, h, projections=pr))
    cross = _named("multihead_attn" if torch_names else "cross_attn", _mha(d, d, d, h, projections=pr))
    ffn = _named("" if torch_names else "ffn", _feed_forward(d, f, act, torch_names))
    res = lambda b: _named("", _t("Residual", b))  # noqa: E731
    ident = _t("Identity", d)
    if first:
        parts = [res(_t("Sequential", n1, self_attn)), _named("", _t("CrossAttend", n2, ident, cross)), res(_t("Sequential", n3, ffn))]
    else:
        parts = [res(self_attn), n1, _named("", _t("CrossAttend", ident, ident, cross)), n2, res(ffn), n3]
    return "Causal<" + _t("WithMemory", *parts) + ">"


def _canon(node):
    name, args, close = node
    if args is None:
        return _bare(name)
    name = _bare(name)
    if close == ")":
        if name not in ("epsilon", "theta") or len(args) != 1:
            raise DeclarationError(f"stformer_declaration: cannot read the call {name}(...)")
        return f"{name}({shortest(float(args[0][0].rstrip('fF')))})"
    a = [_canon(x) for x in args]
    if name == "Linear":
        return _t("Linear", a[0], a[1], a[3] if len(a) > 3 else "Bias::yes")
    if name in ("LayerNorm", "RMSNorm"):
        return _t(name, *a) if len(a) > 1 else _norm(name, a[0])
    if name == "SelfAttention":
        return _mha(a[0], a[0], a[0], a[1], *(a[2:3] or ["ScoreScale::head_width"]), *(a[3:4] or ["Projections::packed"]))
    if name == "MultiHeadAttention":
        return _mha(*a[:4], *(a[4:5] or ["ScoreScale::head_width"]), *(a[5:6] or ["Projections::separate"]))
    if name == "RotaryAttention":
        return _t(name, *a[:4], *(a[4:5] or ["Rotation::pairs"]), *(a[5:6] or ["theta(10000)"]), *(a[6:7] or ["Bias::no"]))
    if name == "Activation":
        return _t(a[0].split("::")[-1], a[1])
    if name == "Named":
        return _named(a[0][1:-1], a[1])
    if name == "Attend":
        return _t("Attend", *a[:3], a[3] if len(a) > 3 else "true")
    if name == "Patchify":
        return _t("Patchify", *a[:4])
    if name == "FeedForward":
        act = a[2].split("::")[-1] if len(a) > 2 else "ReLU"
        return _feed_forward(a[0], a[1], act, len(a) > 3 and a[3] == "FfnNames::linear")
    if name == "EncoderBlock":
        return _encoder(*a[:3], _form(args[3]) if len(args) > 3 else ("ScaleNorm", "ReLU", True))
    if name == "DecoderBlock":
        return _decoder(*a[:3], _form(args[3]) if len(args) > 3 else ("ScaleNorm", "ReLU", True))
    if name == "TransformerDecoder":
        parts = [_named("layers", _t("Repeat", a[0], a[1]))] + ([_named("norm", a[2])] if len(a) > 2 and a[2] != "void" else [])
        return "Causal<" + _t("WithMemory", *parts) + ">"
    if name == "WithMemory":
        inner = _t("WithMemory", *a[1:])
        return f"Causal<{inner}>" if a[0] == "true" else inner
    return _t(name, *a)


def declaration(cpp, causal=False):
    """The canonical declaration of the C++ type cpp (as the exporter writes it); causal: the
    model declares itself causal (the header's struct with causal = true)."""
    tokens = _tokens(cpp)
    node, end = _parse(tokens)
    if end != len(tokens):
        raise DeclarationError(f"stformer_declaration: text after the type: {' '.join(tokens[end:end + 5])}")
    text = _canon(node)
    return f"Causal<{text}>" if causal and not text.startswith("Causal<") else text
