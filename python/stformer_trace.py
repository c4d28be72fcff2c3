"""stformer_trace: a PyTorch module's own forward, traced by torch.fx, read as an stformer declaration.

stformer_export.export calls it for any module that is not a plain chain of the modules it lists.
The forward is traced with the example input (torch.fx: PyTorch's layers stay whole, everything
else is followed into), every value is computed once on the example, and the graph is read as
stformer's steps and combinators:

    a step on the stream               a leaf (Linear, LayerNorm, an activation, SelfAttention, ...)
    one after the other                Sequential<...>
    x + f(x)                           Residual<f>
    f(x) + g(x)                        Parallel<f, g>
    f(x) * g(x)                        Gated<f, g>

Attention is found where the author wrote it: nn.MultiheadAttention called on one stream, or
written out (q, k, v from one Linear packed or three, heads by view/reshape/permute/transpose,
q @ k^T times a scale, a mask from a buffer, softmax, @ v, heads merged, an output Linear). Its
heads are read off the scores' shape; its scale and mask are those of the values the trace
computed (1/sqrt(head width) or 1/sqrt(width); no mask, or the causal one; with key_padding, the
forward's second input as a key mask), and nothing else is taken. The declaration is then computed in PyTorch, step by step as stformer computes it, on the
example input, and must give the module's output: a model is never exported to compute another
function.

What cannot be read is refused naming the operation, its module and its source line, every one
at once.
"""
import inspect
import math
import operator
import os
import sys

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stformer_declaration import shortest  # noqa: E402


class TraceError(ValueError):
    """The reasons a module's forward cannot be read, one per line."""


# ---------------------------------------------------------------------------------------------
# The declaration: leaves and combinators, each able to write its C++ type and to compute itself.

class Leaf:
    """A step of stformer's own: its C++ type, its parameters (name -> tensor, under `prefix`, by default its path), and
    `fn`, what it computes in PyTorch (from the stream [B, N, D] to the next)."""

    def __init__(self, path, cpp, what, fn, state=None, causal=False, prefix=None, attends=False):
        self.path, self.cpp, self.what, self.fn, self.state, self.causal = path, cpp, what, fn, state or {}, causal
        self.attends = attends  # an attention (or a block holding one): causal or not
        self.prefix = path if prefix is None else prefix  # the state's names are prefix.name

    def type(self):
        return f'stformer::Named<"{self.path}", {self.cpp}>'

    def __call__(self, x):
        return self.fn(x)

    def leaves(self):
        return [self]


class CrossLeaf(Leaf):
    """A cross-attention: the rows' queries over the keys and values of the memory (kv: a norm of the
    memory, its Leaf, or None: the memory itself). Read as the last step of x + f(x) after at most
    a norm of the rows: stformer's CrossAttend<Query, KeyValue, Attention> (Residual.type)."""

    def __init__(self, path, cpp, what, fn, state, kv, width):
        super().__init__(path, cpp, what, fn, state, attends=True)
        self.kv, self.width = kv, width

    def leaves(self):
        return [self] + ([self.kv] if self.kv else [])


# The leaves that run in place on the rows: a step of WithMemory (compose/memory.hpp) besides a
# Residual or a CrossAttend.
IN_PLACE = ("stformer::LayerNorm<", "stformer::RMSNorm<", "stformer::ReLU<", "stformer::GELU<", "stformer::GELUTanh<", "stformer::SiLU<",
            "stformer::Tanh<", "stformer::LayerScale<", "stformer::PositionEmbedding<", "stformer::SelfAttention<")
NORMS = ("stformer::LayerNorm<", "stformer::RMSNorm<")


def _unnamed(part):
    """A part of Parallel or Gated: its name, else none (not its index)."""
    return part if part.startswith("stformer::Named<") else f'stformer::Named<"", {part}>'


class Chain:
    def __init__(self, steps):
        self.steps = steps

    def type(self):
        if len(self.steps) == 1:
            return self.steps[0].type()
        return 'stformer::Named<"", stformer::Sequential<' + ", ".join(s.type() for s in self.steps) + ">>"

    def body(self):
        """As a combinator's part: a chain of its steps, or its one step itself."""
        if len(self.steps) == 1:
            return self.steps[0].type()
        return "stformer::Sequential<" + ", ".join(s.type() for s in self.steps) + ">"

    def __call__(self, x):
        for s in self.steps:
            x = s(x)
        return x

    def leaves(self):
        return [leaf for s in self.steps for leaf in s.leaves()]


class Residual:
    def __init__(self, body):
        self.body = body

    def cross(self):
        """The cross-attention this is, x + attention(query(x), memory) with query a norm or nothing; else None."""
        steps = self.body.steps
        if steps and isinstance(steps[-1], CrossLeaf) and len(steps) <= 2 and \
                all(isinstance(q, Leaf) and q.cpp.startswith(NORMS) for q in steps[:-1]):
            return steps[-1]
        return None

    def type(self):
        c = self.cross()
        if c is not None:
            identity = f"stformer::Identity<{c.width}>"
            query = self.body.steps[0].type() if len(self.body.steps) == 2 else identity
            return f'stformer::Named<"", stformer::CrossAttend<{query}, {c.kv.type() if c.kv else identity}, {c.type()}>>'
        return f'stformer::Named<"", stformer::Residual<{self.body.body()}>>'

    def __call__(self, x):
        return x + self.body(x)

    def leaves(self):
        return self.body.leaves()


class Parallel:
    def __init__(self, branches):
        self.branches = branches

    def type(self):
        return 'stformer::Named<"", stformer::Parallel<' + ", ".join(_unnamed(b.body()) for b in self.branches) + ">>"

    def __call__(self, x):
        y = self.branches[0](x)
        for b in self.branches[1:]:
            y = y + b(x)
        return y

    def leaves(self):
        return [leaf for b in self.branches for leaf in b.leaves()]


class Gated:
    def __init__(self, gate, value):
        self.gate, self.value = gate, value

    def type(self):
        return f'stformer::Named<"", stformer::Gated<{_unnamed(self.gate.body())}, {_unnamed(self.value.body())}>>'

    def __call__(self, x):
        return self.gate(x) * self.value(x)

    def leaves(self):
        return self.gate.leaves() + self.value.leaves()


def _block_of(step):
    """The module a step belongs to, when it is the i-th of a list of blocks: (X, i) of the paths
    'X.i.…' its leaves with parameters share; else None."""
    paths = [leaf.path.split(".") for leaf in step.leaves() if leaf.state]
    if not paths:
        return None
    common = []
    for level in zip(*paths):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    for k in range(len(common) - 1, -1, -1):
        if common[k].isdigit():
            return ".".join(common[:k]), int(common[k])
    return None


def _parts(step):
    """A step and every step inside it."""
    yield step
    for inner in getattr(step, "steps", []) + [getattr(step, "body", None)] + getattr(step, "branches", []) + \
            [getattr(step, "gate", None), getattr(step, "value", None)]:
        if inner is not None and not isinstance(inner, Leaf):
            yield from _parts(inner)
        elif inner is not None:
            yield inner


def reads_memory(step):
    return any(isinstance(leaf, CrossLeaf) for leaf in step.leaves())


def memory_errors(steps):
    """Why a chain of steps that reads a memory is not stformer's WithMemory: each cross-attention the
    last step of a residual (x + attention(norm(x), memory)), every step one that runs in place on the
    rows (a residual block, a norm, an activation, LayerScale, positions, self-attention)."""
    errors = []
    crosses = [p.cross() for s in steps for p in _parts(s) if isinstance(p, Residual) and p.cross() is not None]
    for leaf in (leaf for s in steps for leaf in s.leaves() if isinstance(leaf, CrossLeaf)):
        if not any(leaf is c for c in crosses):
            errors.append(f"'{leaf.path}' ({leaf.what}): a cross-attention is read as x + attention(x, memory), or x + attention(norm(x), "
                          "memory) (stformer's CrossAttend)")
    for s in steps:
        if not isinstance(s, Residual) and not (isinstance(s, Leaf) and s.cpp.startswith(IN_PLACE)):
            what = f"'{s.path}' ({s.what})" if isinstance(s, Leaf) else type(s).__name__.lower() + " branches"
            errors.append(f"{what}: a model over a memory is stformer's WithMemory, whose steps keep the rows in place "
                          "(residual blocks, norms, activations, LayerScale, positions, self-attention)")
    return errors


def repeated(steps, memory=None):
    """The C++ types of a chain's steps, each run of blocks X.0, X.1, … X.(n−1) of one structure
    (the same types once their paths are taken relative to X.i) written once, as
    Named<"X", Repeat<Sequential<…>, n>>: one type for n blocks, as the module has one class.
    memory ("true"/"false": causal or not): steps of a model over a memory, whose blocks that read
    it are each a WithMemory<causal, …>; blocks that do not are written one step at a time."""
    types, i = [], 0
    while i < len(steps):
        key = _block_of(steps[i])
        if key is None or key[1] != 0:
            types.append(steps[i].type())
            i += 1
            continue
        name, blocks, j = key[0], [], i
        while j < len(steps) and _block_of(steps[j]) == (name, len(blocks)):
            block = []
            while j < len(steps) and _block_of(steps[j]) == (name, len(blocks)):
                block.append(steps[j])
                j += 1
            blocks.append(block)

        def relative(block, k):
            at = f"{name}.{k}" if name else str(k)
            chain = f"stformer::WithMemory<{memory}, " if memory else "stformer::Sequential<"
            return chain + ", ".join(s.type() for s in block).replace(f'Named<"{at}.', 'Named<"').replace(
                f'Named<"{at}"', 'Named<""') + ">"
        bodies = [relative(b, k) for k, b in enumerate(blocks)]
        if len(blocks) >= 2 and all(b == bodies[0] for b in bodies) and (not memory or any(reads_memory(s) for s in blocks[0])):
            types.append(f'stformer::Named<"{name}", stformer::Repeat<{bodies[0]}, {len(blocks)}>>')
            i = j
        else:
            types.append(steps[i].type())
            i += 1
    return types


# ---------------------------------------------------------------------------------------------
# Tracing

_ACT_FUNCTIONS = {F.relu: "ReLU", torch.relu: "ReLU", F.silu: "SiLU", F.gelu: "GELU", torch.tanh: "Tanh", F.tanh: "Tanh"}
_RELABEL_METHODS = {"view", "reshape", "permute", "transpose", "contiguous", "flatten", "squeeze", "unsqueeze", "chunk", "split",
                    "unflatten", "size", "dim", "unbind"}
_RELABEL_FUNCTIONS = {torch.reshape, torch.permute, torch.transpose, torch.flatten, torch.squeeze, torch.unsqueeze, torch.chunk,
                      torch.split, torch.unbind, operator.getitem, getattr, torch.Tensor.transpose, torch.Tensor.view}
_SOFTMAX = {F.softmax, torch.softmax}
_MATMUL = {operator.matmul, torch.matmul, torch.bmm, torch.einsum}
_DROPOUT_FUNCTIONS = {F.dropout}


def _is_div(target, name):
    """Whether a node (its target, and the name of a method's or function's) divides: x / y, x.div(y), torch.div."""
    return target in (operator.truediv, torch.div, operator.itruediv) or name in ("div", "true_divide")


class _Proxy(torch.fx.Proxy):
    """A traced value that also holds its value on the example: shapes are plain numbers, so the
    forward's own arithmetic on them (x.shape, x.size(1), torch.arange(n), unbind, iteration) runs."""

    @property
    def shape(self):
        return self.value.shape

    def size(self, dim=None):
        return self.value.size() if dim is None else self.value.size(dim)

    def dim(self):
        return self.value.dim()

    @property
    def ndim(self):
        return self.value.dim()

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def device(self):
        return self.value.device

    def __len__(self):
        return len(self.value)

    def __iter__(self):
        return iter([self[i] for i in range(len(self.value))])


class _Untraced:
    """Within it, nn.Module is called and read as it is outside a trace (torch.fx's patches lifted)."""

    def __enter__(self):
        from torch.fx._symbolic_trace import _orig_module_call, _orig_module_getattr
        self.kept = nn.Module.__call__, nn.Module.__getattr__
        nn.Module.__call__, nn.Module.__getattr__ = _orig_module_call, _orig_module_getattr

    def __exit__(self, *_):
        nn.Module.__call__, nn.Module.__getattr__ = self.kept


class _Tracer(torch.fx.Tracer):
    """torch.fx's tracer with shapes made concrete: each node's value on the example is computed
    as the node is made (values)."""

    def __init__(self, leaves, example):
        super().__init__()
        self.record_stack_traces = True
        self.leaf_types = leaves
        self.examples = example if isinstance(example, tuple) else (example,)
        self.placed = 0
        self.values = {}
        self.within = []  # the module paths being traced into, innermost last

    def is_leaf_module(self, m, qualname):
        return isinstance(m, self.leaf_types) or super().is_leaf_module(m, qualname)

    def call_module(self, m, forward, args, kwargs):
        self.within.append(self.path_of_module(m))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self.within.pop()

    def proxy(self, node):
        return _Proxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        p = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        a, kw = torch.fx.node.map_aggregate((args, kwargs), lambda v: v.value if isinstance(v, _Proxy) else v)
        with torch.no_grad(), _Untraced():
            if kind == "placeholder":  # the example's inputs in order: the rows or ids, then constants (a mask)
                # (past them, a parameter fixed at its default: its value)
                value = self.examples[self.placed] if self.placed < len(self.examples) else (a[0] if a else None)
                self.placed += 1
            elif kind == "get_attr":
                value = self.root
                for part in target.split("."):
                    value = getattr(value, part)
            elif kind == "call_function":
                value = target(*a, **kw)
            elif kind == "call_method":
                value = getattr(a[0], target)(*a[1:], **kw)
            elif kind == "call_module":
                value = self.root.get_submodule(target)(*a, **kw)
            else:
                value = None
        p.value = value
        self.values[p.node] = value
        if self.within and kind != "call_module":
            p.node.meta["stformer.module"] = self.within[-1]
        if SOURCE is not None:
            p.node.meta["stformer.source"] = SOURCE
        return p


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep

# Where the operations being traced come from, when not from Python source: a graph read from
# another format (stformer_onnx sets it to the ONNX node it runs); named in refusals instead of a
# source line.
SOURCE = None


def _where(node):
    """Where a node's code is: its module and source line ("in 'blocks.0.attn' at model.py:31: code"),
    or the node of the graph it was read from (SOURCE)."""
    if "stformer.source" in node.meta:
        return f"at {node.meta['stformer.source']}"
    lines = [l for l in (getattr(node, "stack_trace", None) or "").split("\n") if l.strip()]
    at = "no source line recorded"
    for i, l in enumerate(lines):  # innermost first: the first frame outside torch and the exporter
        l = l.strip()
        if l.startswith("File ") and '"' in l:
            file = l.split('"')[1]
            if file.startswith(_TORCH_DIR) or file.endswith(("stformer_trace.py", "stformer_export.py")):
                continue
            line = l.split("line ")[1].split(",")[0] if "line " in l else "?"
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            at = f"{file.rsplit('/', 1)[-1]}:{line}: {code}"
            break
    module = node.meta.get("stformer.module")
    return f"in '{module}' at {at}" if module else f"at {at}"


def _describe(node):
    if node.op == "call_module":
        return f"module '{node.target}'"
    if node.op in ("call_function",):
        return f"{getattr(node.target, '__name__', str(node.target))}()"
    if node.op == "call_method":
        return f".{node.target}()"
    return f"{node.op} {node.target}"


class _Reader:
    def __init__(self, module, example, leaves, extra, key_padding=False, memory=False):
        self.module = module
        self.errors = []
        self.extra = extra  # stformer_export's own modules: type -> reader(reader, node, module, x) -> Leaf
        tracer = _Tracer(leaves, example)
        # the forward's parameters past the example's, with defaults (targets=None): those values, fixed
        given = len(example) if isinstance(example, tuple) else 1
        fixed = {p.name: p.default for p in list(inspect.signature(module.forward).parameters.values())[given:]
                 if p.default is not inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        try:
            graph = tracer.trace(module, concrete_args=fixed or None)
        except Exception as e:
            if isinstance(e, torch.fx.proxy.TraceError) or "symbolically traced variables" in str(e):
                raise TraceError(f"stformer_export: torch.fx cannot follow the model's forward: {e}\n"
                                 "  (control flow that depends on the input's values cannot be traced; shapes may be read)") from e
            raise TraceError(f"stformer_export: the model's forward fails on the example input: {type(e).__name__}: {e}") from e
        self.graph = graph
        self.modules = dict(module.named_modules())
        self.values = tracer.values
        out = next(n for n in graph.nodes if n.op == "output")
        self.output = torch.fx.node.map_arg(out.args[0], lambda n: self.values[n])
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self.inputs = placeholders[:given]  # (those past them: parameters fixed at their defaults)
        self.example = example[0] if isinstance(example, tuple) else example
        if len(placeholders) - len(fixed) != given:
            raise TraceError(f"stformer_export: the forward takes {len(placeholders) - len(fixed)} inputs, the example gives "
                             f"{given}: give them all, as a tuple")
        self.key_input = None  # key_padding: the forward's second input, its rows' key mask
        if key_padding:
            if len(self.inputs) < 2:
                raise TraceError("stformer_export: key_padding=True: the forward's second input is the key mask, "
                                 "and the example gives none: give (input, mask) with mask of shape (B, N)")
            self.key_input = self.inputs[1]
        self.memory_input = self.inputs[1] if memory else None  # memory: the forward's second input, a memory of rows (B, M, D)

    # -- what depends on the input ------------------------------------------------------------
    def depends(self):
        """Nodes whose value depends on the input."""
        dep = set()
        for n in self.graph.nodes:
            if n is self.inputs[0]:  # the others (a causal mask; a key mask, read where an attention uses it) are constants
                dep.add(n)
            elif any(a in dep for a in n.all_input_nodes):
                dep.add(n)
        return dep

    def memory_depends(self):
        """Nodes whose value depends on the memory (and not on the input)."""
        dep, mdep = self.depends(), set()
        for n in self.graph.nodes:
            if n is self.memory_input or n not in dep and any(a in mdep for a in n.all_input_nodes):
                mdep.add(n)
        return mdep

    def fail(self, node, why):
        self.errors.append(f"{_describe(node)} {_where(node)}: {why}")

    def const(self, arg):
        """The value of an argument that does not depend on the input."""
        if isinstance(arg, torch.fx.Node):
            if arg not in self.values and arg.op == "get_attr":  # a buffer or constant the trace did not compute
                value = self.module
                for part in arg.target.split("."):
                    value = getattr(value, part)
                self.values[arg] = value
            return self.values[arg]
        return arg


def _causal_mask_value(m, n):
    """Whether a mask tensor (bool: True = hidden, or additive: -inf hidden) is the causal one over n rows."""
    if not torch.is_tensor(m):
        return None
    m = m[..., :n, :n] if m.dim() >= 2 and m.shape[-1] >= n and m.shape[-2] >= n else m
    if m.dim() < 2 or m.shape[-1] != n or m.shape[-2] != n:
        return None
    m = m.reshape(-1, n, n)[0]
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    hidden = m if m.dtype == torch.bool else torch.isinf(m) & (m < 0)
    if m.dtype != torch.bool and not torch.all((m == 0) | hidden):
        return None
    if torch.equal(hidden, upper):
        return True
    if not hidden.any():
        return False
    return None


def with_tokens(keys, rows):
    """The key mask (B, N) of the input's rows for rows >= N: the rows put before them (class
    tokens) exist, as stformer's pass reads it (compose/sequential.hpp, shift_keys)."""
    return torch.cat([torch.ones(keys.shape[0], rows - keys.shape[1], dtype=torch.bool), keys], dim=1)


def reference_attention(x, w_in, b_in, w_out, b_out, heads, scale, causal, keys=None, kv=None):
    """Multi-head self-attention of x [B, N, D] with packed projections, as stformer computes it;
    keys (B, N - K), when given: True for the rows that exist, whose keys alone are read (the K
    rows of class tokens put before them exist). kv [B, M, D], when given: the keys' and values'
    rows (cross-attention: the queries' from x)."""
    b, n, d = x.shape
    if kv is None:
        q, k, v = F.linear(x, w_in, b_in).split(d, dim=-1)
    else:
        q = F.linear(x, w_in[:d], b_in[:d])
        k, v = F.linear(kv, w_in[d:], b_in[d:]).split(d, dim=-1)
    m = k.shape[1]
    dh = d // heads
    q = q.reshape(b, n, heads, dh).transpose(1, 2)
    k, v = (t.reshape(b, m, heads, dh).transpose(1, 2) for t in (k, v))
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    if keys is not None:
        s = s.masked_fill(~with_tokens(keys, m)[:, None, None, :], float("-inf"))
    o = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
    return F.linear(o, w_out, b_out)


def reference_rotary(x, w, b, heads, kv_heads, base, halves):
    """The llama family's causal attention of x [B, N, D] (RotaryAttention): w, b the weights and
    biases of q, k, v, o; each head's pairs of q and k, (2i, 2i + 1) or with halves (i, i + Dh/2),
    turned by position·base^(−2i/Dh); query head h reads key/value head h // (heads / kv_heads)."""
    bsz, n, d = x.shape
    dh = d // heads
    q, k, v = (F.linear(x.to(wi.dtype), wi, bi) for wi, bi in zip(w[:3], b[:3]))
    q, k, v = q.reshape(bsz, n, heads, dh), k.reshape(bsz, n, kv_heads, dh), v.reshape(bsz, n, kv_heads, dh)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    cos, sin = angle.cos().to(q.dtype)[None, :, None, :], angle.sin().to(q.dtype)[None, :, None, :]

    def turn(t):
        ia = torch.arange(dh // 2) if halves else torch.arange(0, dh, 2)
        ib = ia + dh // 2 if halves else ia + 1
        out = t.clone()
        out[..., ia] = t[..., ia] * cos - t[..., ib] * sin
        out[..., ib] = t[..., ia] * sin + t[..., ib] * cos
        return out
    q, k = turn(q), turn(k)
    group = heads // kv_heads
    k, v = (t.repeat_interleave(group, dim=2) for t in (k, v))
    s = torch.einsum("bnhd,bmhd->bhnm", q, k) / math.sqrt(dh)
    s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    o = torch.einsum("bhnm,bmhd->bnhd", s.softmax(-1), v).reshape(bsz, n, d)
    return F.linear(o, w[3], b[3])


def _close(a, b, tol=1e-4):
    if not (torch.is_tensor(a) and torch.is_tensor(b)) or a.numel() != b.numel():
        return False
    a, b = a.reshape(-1).double(), b.reshape(-1).double()
    return float((a - b).abs().max()) <= tol * max(1e-30, float(b.abs().max()))


def _operands(n):
    """The two tensors of a product: a @ b, torch.matmul(a, b), torch.bmm(a, b), torch.einsum(eq, a, b)."""
    if n.target is torch.einsum:
        rest = n.args[1:]
        return tuple(rest[0]) if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else tuple(rest[:2])
    return tuple(n.args[:2])


def _prefix(paths):
    """The module path the given module paths share ('blocks.0.attn' of 'blocks.0.attn.q', ...)."""
    parts = [p.split(".") for p in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common)


def _canonical(v, batch, seq_first=False):
    """A stream value as stformer's rows (B, N, D): (B, N, D) itself, (B, D) as (B, 1, D); for a
    sequence-first model (N, B, D), and (B, D); for one sequence (B = 1) either layout, the same
    bytes (nn.MultiheadAttention written to ONNX turns its rows sequence-first); else None."""
    if not torch.is_tensor(v) or v.dim() not in (2, 3):
        return None
    if v.dim() == 2 and batch == 1:  # one sequence's rows (N, D), or its pooled row (1, D)
        return (1, v.shape[0], v.shape[1])
    if v.dim() == 2:
        return (v.shape[0], 1, v.shape[1]) if v.shape[0] == batch else None
    if batch == 1 and 1 in v.shape[:2]:
        return (1, v.shape[1] if v.shape[0] == 1 else v.shape[0], v.shape[2])
    if seq_first:
        return (v.shape[1], v.shape[0], v.shape[2]) if v.shape[1] == batch else None
    return tuple(v.shape) if v.shape[0] == batch else None


class _Op:
    """A node of the graph over streams: the input, a step (leaf) on one stream, or a join of two
    streams (add, mul)."""

    def __init__(self, kind, inputs, leaf=None):
        self.kind, self.inputs, self.leaf = kind, inputs, leaf


def read(module, example, leaves, known, seq_first=False, key_padding=False, memory=False):
    """The declaration (a Chain) of module's forward on example, the output's rows (B, N, D), the
    module's output on the example and, with key_padding, the example's key mask (B, N) as
    stformer reads it (True: a row that exists); raises TraceError with every reason.
    leaves: module types traced whole; known(path, module, in_shape, node) -> list of Leaf for the
    modules stformer_export reads itself (None when it refuses; it records why).
    memory: the forward's second input is a memory (B, M, D) that cross-attentions read (CrossLeaf)."""
    r = _Reader(module, example, leaves, known, key_padding, memory)
    return _Build(r, seq_first).run()


class _Build:
    def __init__(self, r, seq_first):
        self.r = r
        self.seq_first = seq_first  # PyTorch's rows (N, B, D), stformer's (B, N, D)
        self.batch = r.example.shape[1 if seq_first else 0]
        self.dep = r.depends()
        self.mdep = r.memory_depends() if r.memory_input is not None else set()
        self.memory = None  # the memory's example as stformer's rows (B, M, D)
        if r.memory_input is not None:
            self.memory = self.rows(self.value(r.memory_input))
            if self.memory is None or self.memory.dim() != 3 or not self.memory.is_floating_point():
                raise TraceError("stformer_export: memory: the forward's second input, rows (B, M, D) of floats, "
                                 f"is {tuple(self.value(r.memory_input).shape)}")
        self.ops = {}          # stream node -> _Op
        self.alias = {}        # node -> the stream node it relabels
        self.absorbed = set()  # nodes inside an attention
        self.attentions = 0
        self.unnamed = 0
        self.unread_attention = False  # an attention was refused: the values inside it are not reported again
        # key_padding: the rows that exist on the example, by the two readings of the mask input (a
        # nonzero entry a row, as BERT's attention_mask; or padding, as PyTorch's key_padding_mask),
        # and the one the model's attention uses (keys_read), the same for every attention
        self.key_readings, self.keys_read = [], None
        self.masked_rows, self.masked_sums = {}, {}  # x·m and its sum over the rows, m the key mask: (stream, reading)
        if r.key_input is not None:
            m = self.value(r.key_input)
            n = r.example.shape[0 if seq_first else 1]
            if not torch.is_tensor(m) or tuple(m.shape) != (self.batch, n):
                raise TraceError(f"stformer_export: key_padding=True: the key mask (the forward's second input) is of shape "
                                 f"{tuple(m.shape) if torch.is_tensor(m) else type(m).__name__}, not (B, N) = ({self.batch}, {n})")
            readings = [("a nonzero entry is a row", m != 0), ("a nonzero entry is padding", m == 0)]
            # the example must tell the readings apart and show the mask read: a row in every sequence, padding in one
            self.key_readings = [(what, k) for what, k in readings if k.any(dim=1).all() and not k.all()]
            if not self.key_readings:
                raise TraceError("stformer_export: key_padding=True: in the example every sequence needs a row that exists and one "
                                 "sequence a padded row, so that the export sees the key mask read")

    def stream(self, node):
        while node in self.alias:
            node = self.alias[node]
        return node

    def value(self, node):
        return self.r.values[node]

    def fail(self, node, why):
        self.r.fail(node, why)

    # -- attention ------------------------------------------------------------------------------
    def _back(self, node, ok):
        """From node back through operations ok(n) accepts, to the first it does not: that node."""
        seen = 0
        while ok(node) and seen < 64:
            nxt = [a for a in node.all_input_nodes if a in self.dep or a in self.mdep]  # (the memory's: a cross-attention's keys)
            if len(nxt) != 1:
                break
            node, seen = nxt[0], seen + 1
        return node

    def _relabel(self, n):
        if n.op == "call_method" and n.target in _RELABEL_METHODS | {"mul", "div", "float", "type_as"}:
            return True
        if n.op == "call_function" and (n.target in _RELABEL_FUNCTIONS or n.target in (operator.mul, operator.truediv)):
            return True
        return False

    def _linear_of(self, node):
        """The nn.Linear call a tensor of the attention comes from through relabellings, or None."""
        src = self._back(node, self._relabel)
        if src.op == "call_module" and isinstance(self.r.modules.get(src.target), nn.Linear):
            return src
        return None

    def _nearest_linear(self, node):
        """The one nn.Linear call node's value is computed from by operations on its output and
        constants alone (a projection, then rotary positions, heads repeated), or None."""
        found, todo, seen = [], [node], set()
        while todo:
            n = todo.pop()
            if n in seen or n not in self.dep:
                continue
            seen.add(n)
            if n.op == "call_module" and isinstance(self.r.modules.get(n.target), nn.Linear):
                found.append(n)
                continue
            if n.op == "placeholder" or n.op == "call_module" or n.target in _SOFTMAX or n.target in _MATMUL:
                return None
            todo.extend(n.all_input_nodes)
        return found[0] if len(found) == 1 else None

    def _claim(self, x, q_lin, k_lin, v_lin, out_lin):
        """The nodes of an attention read as one step, between its input x and its output projection
        (that excluded), taken as read; its path (the projections' common module, or attentionN).
        None, with the reason, when a value inside it is used outside it."""
        inside = self._between(x, out_lin)
        for node in inside - {out_lin}:
            for u in node.users:
                if u not in inside:
                    return self.fail(node, "a value inside the attention is used outside it (its weights?)")
        self.absorbed |= inside - {out_lin}
        path = _prefix([n.target for n in (q_lin, k_lin, v_lin, out_lin)]) or f"attention{self.attentions}"
        self.attentions += 1
        return path

    def rotary_attention(self, soft, mm1, x, q_lin, k_lin, v_lin, out_lin):
        """The attention of the llama family (RotaryAttention): q, k, v from nn.Linear of one input,
        each query head's and key head's pairs of features turned by position·Θ^(−2i/Dh) (the pairs
        (2i, 2i + 1) or (i, i + Dh/2)), key/value heads shared by groups of query heads, causal.
        The rotation and Θ are read off the values the trace computed, and the whole checked."""
        r = self.r
        q_mod, k_mod, v_mod, o_mod = (r.modules[n.target] for n in (q_lin, k_lin, v_lin, out_lin))
        if k_lin.args[0] is not x or v_lin.args[0] is not x:
            return self.fail(mm1, "the keys and values are not projected from the queries' input")
        xv, want = self.rows(self.value(x)), self.rows(self.value(out_lin))
        sv = self.value(mm1)
        d = q_mod.out_features
        heads = sv.shape[1] if sv.dim() == 4 else 0
        if xv is None or want is None or heads < 1 or d % heads or (d // heads) % 2 or k_mod.out_features != v_mod.out_features \
                or k_mod.out_features % (d // heads) or heads % (k_mod.out_features // (d // heads)) or o_mod.in_features != d \
                or o_mod.out_features != xv.shape[-1] or q_mod.in_features != xv.shape[-1] or d != xv.shape[-1]:
            return self.fail(soft, f"an attention of scores {tuple(sv.shape)} whose projections are not q [D, D], k and v [KVH·Dh, D] "
                                   "with KVH dividing the heads, o [D, D] (Dh even)")
        dh = d // heads
        kvh = k_mod.out_features // dh
        biased = [m.bias is not None for m in (q_mod, k_mod, v_mod, o_mod)]
        if len(set(biased)) > 1:
            return self.fail(q_lin, "biases on some of the attention's projections only")
        # the rotation: the queries before (q_lin) and as the scores read them (mm1's first operand)
        pre = self.value(q_lin).detach().double()
        post = self.value(_operands(mm1)[0]).detach().double()
        b, n = xv.shape[0], xv.shape[1]
        if post.shape == (b, heads, n, dh):
            post = post.transpose(1, 2)
        if self.seq_first and pre.dim() == 3:
            pre = pre.transpose(0, 1)
        pre, post = pre.reshape(b, n, heads, dh), post.reshape(b, n, heads, dh)
        found = None
        for halves in (False, True):
            ia = torch.arange(dh // 2) if halves else torch.arange(0, dh, 2)
            ib = ia + dh // 2 if halves else ia + 1
            if n < 2:
                break
            a0, b0, a1, b1 = pre[..., ia], pre[..., ib], post[..., ia], post[..., ib]
            angles = torch.atan2(a0 * b1 - b0 * a1, a0 * a1 + b0 * b1)[:, 1].reshape(-1, dh // 2)  # position 1: ω_i
            omega = angles.median(dim=0).values
            if abs(float(omega[0]) - 1.0) > 1e-3:
                continue
            base = float(omega[1]) ** (-dh / 2) if dh >= 4 and float(omega[1]) > 0 else 10000.0
            base = float(round(base)) if abs(base - round(base)) <= 1e-3 * base else base
            bias = (lambda m, k: m.bias.detach() if m.bias is not None else torch.zeros(k))  # noqa: E731
            w = [m.weight.detach() for m in (q_mod, k_mod, v_mod, o_mod)]
            bs = [bias(m, m.out_features) for m in (q_mod, k_mod, v_mod, o_mod)]
            got = reference_rotary(xv, w, bs, heads, kvh, base, halves)
            if _close(got, want):
                found = (halves, base, w, bs)
                break
        if found is None:
            self.absorbed |= self._between(x, out_lin)
            return self.fail(soft, f"not the rotary attention stformer computes ({heads} heads of {dh}, {kvh} key/value heads, q and k "
                                   "turned pair by pair, (2i, 2i + 1) or (i, i + Dh/2), by position·Θ^(−2i/Dh) from position 0, "
                                   "scale 1/sqrt(Dh), causal)")
        halves, base, w, bs = found
        path = self._claim(x, q_lin, k_lin, v_lin, out_lin)
        if path is None:
            return False
        # the table's positions: the longest constant of angles the rotation reads (a model's max_seq_len), else the example's
        tables = [self._whole(self.r.const(c)) for c in self._consts(_operands(mm1)[0]) if c.op == "get_attr"]
        positions = max([n] + [int(t.shape[0]) for t in tables if torch.is_tensor(t) and t.dim() >= 2 and t.shape[-1] in (dh // 2, dh)])
        state = {"wq.weight": w[0], "wk.weight": w[1], "wv.weight": w[2], "wo.weight": w[3]}
        if biased[0]:
            state.update({"wq.bias": bs[0], "wk.bias": bs[1], "wv.bias": bs[2], "wo.bias": bs[3]})
        theta = f"{int(base)}.0" if float(base).is_integer() and abs(base) < 1e9 else shortest(base)
        leaf = Leaf(path, f"stformer::RotaryAttention<{d}, {heads}, {kvh}, {positions}, stformer::Rotation::{'halves' if halves else 'pairs'}, "
                          f"stformer::theta({theta}f), stformer::Bias::{'yes' if biased[0] else 'no'}>",
                    f"rotary attention written out: {heads} heads, {kvh} key/value heads, Θ {theta}, causal",
                    lambda y: reference_rotary(y, w, bs, heads, kvh, base, halves), state, True, attends=True)
        self.ops[out_lin] = _Op("unary", [x], leaf)
        return True

    def attention(self, soft):
        """Reads the attention written out around softmax node `soft` as a SelfAttention leaf
        ending at its output Linear; False (with the reason) when it cannot."""
        r = self.r
        scores = soft.args[0]
        dim = soft.kwargs.get("dim", soft.args[1] if len(soft.args) > 1 else None)
        sv = self.value(scores)
        if dim not in (-1, sv.dim() - 1):
            return self.fail(soft, "a softmax over another axis than the keys' (the last)")
        masked = False

        def before_scores(n):
            nonlocal masked
            if n.op == "call_method" and n.target == "masked_fill" or n.op == "call_function" and n.target in (torch.masked_fill,):
                masked = True
                return True
            if n.op == "call_function" and n.target in (operator.add, torch.add) or n.op == "call_method" and n.target == "add":
                deps = [a for a in n.all_input_nodes if a in self.dep]
                if len(deps) == 1:
                    masked = True
                    return True
                return False
            return n.op == "call_function" and n.target in (operator.mul, operator.truediv, torch.mul, torch.div) or \
                n.op == "call_method" and n.target in ("mul", "div", "float", "type_as", "view", "reshape", "contiguous")

        mm1 = self._back(scores, before_scores)
        if not (mm1.op == "call_function" and mm1.target in _MATMUL):
            return self.fail(soft, "the scores before this softmax are not q @ k^T (a matmul or einsum) times a scale, with a mask")
        q_lin, k_lin = (self._linear_of(a) for a in _operands(mm1))
        # forward: softmax (through dropout) @ v
        users = list(soft.users)
        node = soft
        while len(users) == 1 and (users[0].op == "call_module" and isinstance(r.modules.get(users[0].target), nn.Dropout)
                                   or users[0].op == "call_function" and users[0].target in _DROPOUT_FUNCTIONS
                                   or users[0].op == "call_method" and users[0].target in ("type_as", "float", "to")):
            node, users = users[0], list(users[0].users)
        if len(users) != 1 or not (users[0].op == "call_function" and users[0].target in _MATMUL) or _operands(users[0])[0] is not node:
            return self.fail(soft, "the softmax's weights are not multiplied by the values (weights @ v), or are used elsewhere too")
        mm2 = users[0]
        v_lin = self._linear_of(_operands(mm2)[1])
        rotary = None in (q_lin, k_lin, v_lin)  # their values changed on the way (rotary positions, grouped heads repeated)
        if rotary:
            q_lin, k_lin, v_lin = (self._nearest_linear(a) for a in (*_operands(mm1), _operands(mm2)[1]))
        if None in (q_lin, k_lin, v_lin):
            return self.fail(mm1, "the queries, keys and values do not each come from an nn.Linear (through view/reshape/permute/split, "
                                  "or rotary positions and repeated key/value heads)")
        # forward from o through the heads' merge to the output Linear
        node = mm2
        while True:
            users = list(node.users)
            if len(users) != 1:
                return self.fail(mm2, "the heads' output is used more than once before the output projection")
            u = users[0]
            if u.op == "call_module" and isinstance(r.modules.get(u.target), nn.Linear):
                out_lin = u
                break
            if u.op == "call_module" and isinstance(r.modules.get(u.target), nn.Dropout) or self._relabel(u):
                node = u
                continue
            return self.fail(u, "between the heads' output and its nn.Linear projection, only view/reshape/transpose/permute")
        x = q_lin.args[0]
        if rotary:
            return self.rotary_attention(soft, mm1, x, q_lin, k_lin, v_lin, out_lin)
        kv_src = None  # cross-attention: the keys' and values' input, from the memory
        if k_lin.args[0] is not x or v_lin.args[0] is not x:
            if not self.mdep or k_lin.args[0] is not v_lin.args[0] or k_lin.args[0] not in self.mdep or x not in self.dep:
                return self.fail(mm1, "the keys and values are not projected from the queries' input" + (
                    ", nor both from the memory" if self.mdep else " (cross-attention: export with memory=, the forward's second input)"))
            kv_src = k_lin.args[0]
        q_mod, k_mod, v_mod, o_mod = (r.modules[n.target] for n in (q_lin, k_lin, v_lin, out_lin))
        xv = self.value(x)
        want = self.value(out_lin)
        if self.rows(xv) is None or self.rows(want) is None:
            return self.fail(soft, f"the attention's input {tuple(xv.shape)} or output {tuple(want.shape)} is not the rows")
        xv, want = self.rows(xv), self.rows(want)
        d = xv.shape[-1]
        if kv_src is not None:
            kv_leaf = self.memory_side(kv_src, d)
            if kv_leaf is False:
                return False
        heads = sv.shape[1] if sv.dim() == 4 else sv.shape[0] // self.batch
        if heads < 1 or d % heads:
            return self.fail(soft, f"scores of shape {tuple(sv.shape)}: no head count that divides the width {d}")

        def bias(m, n):
            return m.bias.detach() if m.bias is not None else torch.zeros(n)
        if q_mod is k_mod is v_mod:
            if q_mod.out_features != 3 * d:
                return self.fail(q_lin, f"a packed projection of {q_mod.out_features} features, not 3 x {d}")
            w_in, b_in = q_mod.weight.detach(), bias(q_mod, 3 * d)
        elif k_mod is v_mod:  # the keys and values packed (a cross-attention's kv Linear), the queries apart
            if q_mod.out_features != d or q_mod.in_features != d or k_mod.out_features != 2 * d or k_mod.in_features != d:
                return self.fail(k_lin, f"a query projection [{q_mod.out_features}, {q_mod.in_features}] and a packed key/value one "
                                        f"[{k_mod.out_features}, {k_mod.in_features}], not [{d}, {d}] and [{2 * d}, {d}]")
            w_in = torch.cat([q_mod.weight.detach(), k_mod.weight.detach()])
            b_in = torch.cat([bias(q_mod, d), bias(k_mod, 2 * d)])
        else:
            if any(m.out_features != d or m.in_features != d for m in (q_mod, k_mod, v_mod)):
                return self.fail(q_lin, "the query, key and value projections are not each [width, width]")
            w_in = torch.cat([m.weight.detach() for m in (q_mod, k_mod, v_mod)])
            b_in = torch.cat([bias(m, d) for m in (q_mod, k_mod, v_mod)])
        if o_mod.in_features != d or o_mod.out_features != d:
            return self.fail(out_lin, "the output projection is not [width, width]")
        w_out, b_out = o_mod.weight.detach(), bias(o_mod, d)
        found = None
        memory = None if kv_src is None else (kv_leaf(self.memory) if kv_leaf else self.memory)
        with torch.no_grad():
            for scale, s_name in ((1 / math.sqrt(d // heads), "head_width"), (1 / math.sqrt(d), "model_width")):
                for causal in ((False, True) if kv_src is None else (False,)):
                    for reading in [None] + (self.key_readings if kv_src is None else []):
                        keys = reading[1] if reading else None
                        if _close(reference_attention(xv, w_in, b_in, w_out, b_out, heads, scale, causal, keys, memory), want):
                            found = found or (s_name, causal, scale, reading)
        if found is None:
            self.absorbed |= self._between(x, out_lin)  # refused whole: its values are not reported one by one
            return self.fail(soft, f"not multi-head attention as stformer computes it ({heads} heads of {d // heads}, "
                                   "scale 1/sqrt(head width) or 1/sqrt(width), no mask or the causal one"
                                   + (" or the key mask" if self.key_readings and kv_src is None else "")
                                   + (" (over the memory: no mask)" if kv_src is not None else "") + ", q, k, v packed in that order)"
                                   + ("; a mask made from the forward's other input is a key mask: export with key_padding=True"
                                      if masked and not self.key_readings and len(self.r.inputs) > 1 else ""))
        s_name, causal, scale, reading = found
        if masked and not causal and reading is None:
            self.absorbed |= self._between(x, out_lin)
            return self.fail(soft, "a mask that is not the causal one" + (
                "" if self.key_readings else " (a key padding mask from the forward's inputs: export with key_padding=True)"))
        if self.key_readings and reading is None and kv_src is None:
            self.absorbed |= self._between(x, out_lin)
            return self.fail(soft, self.UNMASKED)
        keys = self.read_keys(soft, reading) if reading else None
        if reading and keys is None:
            return False
        path = self._claim(x, q_lin, k_lin, v_lin, out_lin)
        if path is None:
            return False
        if kv_src is not None:
            leaf = self.cross_attention(path, d, heads, s_name, scale, w_in, b_in, w_out, b_out, "cross-attention written out", kv_leaf)
        else:
            leaf = self.self_attention(path, d, heads, s_name, scale, causal, w_in, b_in, w_out, b_out, "attention written out", keys)
        self.ops[out_lin] = _Op("unary", [x], leaf)
        return True

    # with a key mask declared, stformer's pass hides the padded rows' keys in every attention
    UNMASKED = "an attention that does not read the key mask, in a model exported with key_padding=True: every attention must"

    def read_keys(self, node, reading):
        """The key mask as the model reads it (reading: one of key_readings), the same for every
        attention; None (with the reason) when another attention read it the other way."""
        if self.keys_read is not None and self.keys_read[0] != reading[0]:
            return self.fail(node, f"the key mask read as '{reading[0]}' here, as '{self.keys_read[0]}' by another attention")
        self.keys_read = reading
        return reading[1]

    def key_padding_mask(self, node, mask):
        """A key_padding_mask argument (True or -inf: padding) as the rows that exist, from the forward's key
        mask input; None, with the reason, for any other."""
        if not self.key_readings:
            return self.fail(node, "a key padding mask: export with key_padding=True, the mask the forward's second input")
        if mask in self.dep:
            return self.fail(node, "a key padding mask computed from the rows")
        v = self.r.const(mask)
        pad = v if torch.is_tensor(v) and v.dtype == torch.bool else (torch.isinf(v) & (v < 0)) if torch.is_tensor(v) else None
        for reading in self.key_readings:  # (a class token's row before them: never padding)
            if pad is not None and pad.dim() == 2 and pad.shape[1] >= reading[1].shape[1] and \
                    torch.equal(pad, ~with_tokens(reading[1], pad.shape[1])):
                return self.read_keys(node, reading)
        return self.fail(node, "a key padding mask that is not the forward's key mask input (True or -inf where it pads; "
                               "False for a class token's row before them)")

    def patch_embedding(self, node, m):
        """A Conv2d with kernel = stride = P on the image input (B, C, H, W), its output made rows of
        patches (flatten/reshape and transpose/permute): Patchify, then the Linear of its weight."""
        image = node.args[0]
        if self.key_readings:
            return self.fail(node, "a patch embedding in a model with a key mask: an image has no padding")
        if image is not self.r.inputs[0] or self.value(image).dim() != 4:
            return self.fail(node, "a Conv2d is read on the model's image input (B, C, H, W) alone, as a patch embedding")
        k, st = m.kernel_size, m.stride
        if k[0] != k[1] or tuple(st) != tuple(k) or any(m.padding) if isinstance(m.padding, tuple) else m.padding not in (0, "valid") \
                or tuple(m.dilation) != (1, 1) or m.groups != 1:
            return self.fail(node, f"a Conv2d other than a patch embedding (kernel_size {k}, stride {st}, padding {m.padding}, "
                                   "dilation, groups): kernel = stride, square, no padding")
        b, c, h, w = self.value(image).shape
        p, d = k[0], m.out_channels
        if h % p or w % p:
            return self.fail(node, f"an image of {h} x {w} pixels in patches of {p}")
        want = self.value(node).flatten(2).transpose(1, 2)  # (B, patches, D)
        exit_, seen = node, {node}
        while True:
            users = list(exit_.users)
            if len(users) != 1 or not self._relabel(users[0]):
                break
            exit_ = users[0]
            seen.add(exit_)
            v = self.value(exit_)
            if torch.is_tensor(v) and v.shape == want.shape and torch.equal(v, want):
                break
        v = self.value(exit_)
        if not (torch.is_tensor(v) and v.shape == want.shape and torch.equal(v, want)):
            return self.fail(node, "the convolution's output is not made rows of patches (B, (H/P)(W/P), D) by flatten/reshape and "
                                   "transpose/permute")
        k_in = c * p * p
        weight = m.weight.detach().reshape(d, k_in).float().clone()
        bias = m.bias.detach().float().clone() if m.bias is not None else torch.zeros(d)
        patches = (h // p) * (w // p)

        def patchify(x):
            return x.reshape(x.shape[0], c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(x.shape[0], patches, k_in)
        steps = [Leaf("", f"stformer::Patchify<{c}, {h}, {w}, {p}>", f"the image ({c}, {h}, {w}) in patches of {p}", patchify),
                 Leaf(node.target, f"stformer::Linear<{k_in}, {d}>", f"nn.Conv2d({c}, {d}, {p}, stride={p}) as a Linear",
                      lambda x: F.linear(x, weight, bias), {"weight": weight, "bias": bias})]
        self.absorbed |= seen - {exit_}
        self.ops[exit_] = _Op("unary", [image], Chain(steps))
        self.image = (c, h, w)
        return True

    def rms_norm(self, rsqrt):
        """RMSNorm written out: x * rsqrt(mean(x^2, -1, keepdim) + eps) (its weight, a product by a
        learned vector after it, joins it: join)."""
        def arg(n, i=0):
            deps = [a for a in n.all_input_nodes if a in self.dep]
            return deps[0] if len(deps) == 1 else None
        def is_(n, fns, method):
            return n is not None and (n.op == "call_function" and n.target in fns or n.op == "call_method" and n.target == method)
        plus = arg(rsqrt)
        if not is_(plus, (operator.add, torch.add), "add"):
            return
        eps = next((self.r.const(a) for a in plus.args if not (isinstance(a, torch.fx.Node) and a in self.dep)), None)
        mean = arg(plus)
        if not is_(mean, (torch.mean,), "mean") or mean.kwargs.get("keepdim", mean.args[2] if len(mean.args) > 2 else False) is not True:
            return
        square = arg(mean)
        x = None
        if is_(square, (torch.pow, operator.pow), "pow") and (square.args[1] if len(square.args) > 1 else None) == 2:
            x = arg(square)
        elif is_(square, (operator.mul, torch.mul), "mul") and square.args[0] is square.args[1]:
            x = square.args[0]
        users = list(rsqrt.users)
        if x is None or eps is None or len(users) != 1 or not is_(users[0], (operator.mul, torch.mul), "mul"):
            return
        prod = users[0]
        if self.stream(x) not in [self.stream(a) for a in prod.args if isinstance(a, torch.fx.Node)] and x not in prod.args:
            return
        d = self.value(x).shape[-1]
        self.absorbed |= {square, mean, plus, rsqrt}
        self.ops[prod] = _Op("unary", [x], self.rms_leaf(self.anon("rms"), torch.ones(d), float(eps)))

    def rms_leaf(self, path, w, eps):
        d = w.shape[0]
        eps32 = float(torch.tensor(eps, dtype=torch.float32))
        written = next(t for t in (f"{eps:g}", f"{eps:.9g}", repr(eps32)) if float(torch.tensor(float(t), dtype=torch.float32)) == eps32)
        return Leaf(path, f"stformer::RMSNorm<{d}, stformer::epsilon({written}f)>", f"RMSNorm({d}, eps={eps:g})",
                    lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w, {"weight": w})

    def self_attention(self, path, d, heads, s_name, scale, causal, w_in, b_in, w_out, b_out, what, keys=None):
        return Leaf(path, f"stformer::SelfAttention<{d}, {heads}, stformer::ScoreScale::{s_name}>",
                    f"{what}: {heads} heads{', causal' if causal else ''}{', key mask' if keys is not None else ''}",
                    lambda x: reference_attention(x, w_in, b_in, w_out, b_out, heads, scale, causal, keys),
                    {"in_proj_weight": w_in, "in_proj_bias": b_in, "out_proj.weight": w_out, "out_proj.bias": b_out}, causal, attends=True)

    def cross_attention(self, path, d, heads, s_name, scale, w_in, b_in, w_out, b_out, what, kv):
        """The attention of the rows over the memory (through kv, a norm, or the memory itself: None)."""
        memory = self.memory

        def fn(x):
            return reference_attention(x, w_in, b_in, w_out, b_out, heads, scale, False, None, kv(memory) if kv else memory)
        return CrossLeaf(path, f"stformer::MultiHeadAttention<{d}, {d}, {d}, {heads}, stformer::ScoreScale::{s_name}, "
                               "stformer::Projections::packed>", f"{what}: {heads} heads over the memory" + (f" through '{kv.path}'" if kv else ""),
                         fn, {"in_proj_weight": w_in, "in_proj_bias": b_in, "out_proj.weight": w_out, "out_proj.bias": b_out}, kv, d)

    def rows(self, v):
        """A value of rows as stformer's (B, N, D) (a sequence-first model's transposed), or None."""
        if _canonical(v, self.batch, self.seq_first) is None:
            return None
        if self.batch == 1:  # one sequence: either layout, the same bytes
            return v.reshape(_canonical(v, 1))
        return v.transpose(0, 1) if self.seq_first else v

    def memory_side(self, node, d):
        """What a cross-attention's keys and values read: the memory itself (None) or a LayerNorm of it
        (its Leaf); False, with the reason, for anything else."""
        r = self.r
        if self.value(r.memory_input).shape[-1] != d:
            return self.fail(node, f"a memory of width {self.value(r.memory_input).shape[-1]} under an attention of width {d}: "
                                   "stformer's cross-attention reads a memory as wide as the rows")
        if node is r.memory_input:
            return None
        m = r.modules.get(node.target) if node.op == "call_module" else None
        if isinstance(m, nn.LayerNorm) and node.args[0] is r.memory_input and len(m.normalized_shape) == 1 and m.elementwise_affine:
            return self.norm_leaf(node.target, m.weight.detach(), m.bias.detach() if m.bias is not None else torch.zeros(d), m.eps)
        if node.op == "call_function" and node.target is F.layer_norm and node.args[0] is r.memory_input:
            w, b = (node.args + (None,) * 5)[2:4]
            eps = node.args[4] if len(node.args) > 4 else node.kwargs.get("eps", 1e-5)
            if w is not None and w not in self.mdep and (b is None or b not in self.mdep):
                wv = r.const(w).detach()
                path = _prefix([a.target for a in (w, b) if isinstance(a, torch.fx.Node) and a.op == "get_attr"]) or self.anon("norm")
                return self.norm_leaf(path, wv, r.const(b).detach() if b is not None else torch.zeros_like(wv), eps)
        return self.fail(node, "a cross-attention's keys and values read the memory itself or an nn.LayerNorm of it "
                               "(stformer's CrossAttend: KeyValue a norm or Identity)")

    def _between(self, a, b):
        """The nodes on paths from a to b, b included, a not."""
        anc, todo = set(), [b]
        while todo:
            n = todo.pop()
            if n in anc or n is a:
                continue
            anc.add(n)
            todo.extend(n.all_input_nodes)
        return {n for n in anc if n in self.dep}

    def mha_module(self, node, m):
        """nn.MultiheadAttention called on one stream: a SelfAttention leaf at its getitem(0)."""
        q, k, v = (node.args + (None, None, None))[:3]
        q, k, v = node.kwargs.get("query", q), node.kwargs.get("key", k), node.kwargs.get("value", v)
        self.absorbed |= {node} | set(node.users)  # read here, or refused here once
        cross = not (q is k is v) and k is v and k in self.mdep and q in self.dep
        if not (q is k is v) and not cross:
            return self.fail(node, "queries, keys and values from different tensors" + (
                ": a cross-attention's keys and values are one tensor from the memory" if self.mdep else
                " (cross-attention: export with memory=, the forward's second input)"))
        if m.batch_first == self.seq_first:
            return self.fail(node, f"batch_first={m.batch_first} in a model whose other attention is batch_first={not m.batch_first}")
        if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
            return self.fail(node, "kdim/vdim, add_bias_kv or add_zero_attn, which stformer's attention has not")
        keys = None
        kpm = node.kwargs.get("key_padding_mask", node.args[3] if len(node.args) > 3 else None)
        if cross and (kpm is not None or node.kwargs.get("attn_mask", node.args[5] if len(node.args) > 5 else None) is not None
                      or node.kwargs.get("is_causal")):
            return self.fail(node, "a mask over the memory's rows: a cross-attention is read unmasked")
        if kpm is not None:
            keys = self.key_padding_mask(node, kpm)
            if keys is None:
                return False
        elif self.key_readings and not cross:
            return self.fail(node, self.UNMASKED)
        causal = False
        mask = node.kwargs.get("attn_mask", node.args[5] if len(node.args) > 5 else None)
        n = _canonical(self.value(q), self.batch, self.seq_first)[1]
        if mask is not None:
            if mask in self.dep:
                return self.fail(node, "an attn_mask computed from the input")
            causal = _causal_mask_value(self.r.const(mask), n)
            if causal is None:
                return self.fail(node, "an attn_mask that is not the causal one")
        if node.kwargs.get("is_causal"):
            causal = True
        outs = [u for u in node.users if u.users or not (u.op == "call_function" and u.target is operator.getitem)]  # x, _ = attn(...)
        if any(not (u.op == "call_function" and u.target is operator.getitem and u.args[1] == 0) for u in outs) or len(outs) != 1:
            return self.fail(node, "its attention weights are used (only its output, [0], is read)")
        d, h = m.embed_dim, m.num_heads
        w_in, w_out = m.in_proj_weight.detach(), m.out_proj.weight.detach()
        b_in = m.in_proj_bias.detach() if m.in_proj_bias is not None else torch.zeros(3 * d)
        b_out = m.out_proj.bias.detach() if m.out_proj.bias is not None else torch.zeros(d)
        self.absorbed |= {node} | set(node.users)
        if cross:
            kv = self.memory_side(k, d)
            if kv is False:
                return False
            leaf = self.cross_attention(node.target, d, h, "head_width", 1 / math.sqrt(d // h), w_in, b_in, w_out, b_out,
                                        "nn.MultiheadAttention", kv)
        else:
            leaf = self.self_attention(node.target, d, h, "head_width", 1 / math.sqrt(d // h), causal, w_in, b_in, w_out, b_out,
                                       "nn.MultiheadAttention", keys)
        self.ops[outs[0]] = _Op("unary", [q], leaf)
        return True

    # -- the graph over streams -------------------------------------------------------------------
    def run(self):
        r = self.r
        nodes = list(r.graph.nodes)
        # attention first: its nodes are read as one step
        for n in nodes:
            if n in self.dep and n not in self.absorbed:
                if n.op == "call_module" and isinstance(r.modules.get(n.target), nn.MultiheadAttention):
                    self.mha_module(n, r.modules[n.target])
                elif n.op == "call_module" and isinstance(r.modules.get(n.target), nn.Conv2d):
                    self.patch_embedding(n, r.modules[n.target])
                elif (n.op == "call_function" and n.target in _SOFTMAX) or (n.op == "call_method" and n.target == "softmax"):
                    self.unread_attention |= not self.attention(n)
                elif (n.op == "call_function" and n.target is torch.rsqrt) or (n.op == "call_method" and n.target == "rsqrt"):
                    self.rms_norm(n)
        out = None
        for n in nodes:
            if n.op == "output":
                out = n.args[0]
                continue
            if n not in self.dep or n in self.absorbed or n in self.ops:
                continue
            self.node(n)
        if r.errors:
            raise TraceError("stformer_export: the model cannot be exported as it stands:\n  " + "\n  ".join(r.errors))
        if not isinstance(out, torch.fx.Node) or out not in self.dep:
            raise TraceError("stformer_export: the forward must return one tensor computed from its input")
        end = self.stream(out)
        shape = _canonical(self.value(out), self.batch, self.seq_first)
        if shape is None:
            raise TraceError(f"stformer_export: the output's shape {tuple(self.value(out).shape)} is not rows (B, N, D) or (B, D)")
        for op in self.ops.values():  # a step read before the relabellings of its input were
            op.inputs = [self.stream(i) for i in op.inputs]
        chain = Chain(self.build(r.inputs[0], end))
        if not chain.steps:
            raise TraceError("stformer_export: the model has no step stformer computes")
        if r.errors:
            raise TraceError("stformer_export: the model cannot be exported as it stands:\n  " + "\n  ".join(r.errors))
        if r.key_input is not None and self.keys_read is None:
            raise TraceError("stformer_export: key_padding=True, but no attention of the model reads its second input as a key mask")
        return chain, shape, r.output, (self.keys_read[1] if self.keys_read else None)

    def unary(self, n, src, leaf):
        self.ops[n] = _Op("unary", [self.stream(src)], leaf)

    def node(self, n):
        r = self.r
        if n.op == "placeholder":
            self.ops[n] = _Op("input", [])
            return
        args = [a for a in n.all_input_nodes if a in self.dep]
        if not torch.is_tensor(self.value(n)) and not isinstance(self.value(n), (tuple, list)):
            return  # a number computed from a shape
        if self.unread_attention and _canonical(self.value(n), self.batch, self.seq_first) is None:
            return  # inside the attention refused
        if any(a in self.masked_rows or a in self.masked_sums for a in args):
            return self.masked_mean(n, args)
        if n.op == "call_module":
            m = r.modules[n.target]
            if isinstance(m, (nn.Dropout, nn.Identity)):
                self.alias[n] = args[0]
                return
            leaves = r.extra(n.target, m, self.value(args[0]) if args else None, n, self)
            if leaves:
                if len(args) != 1:
                    return self.fail(n, "a module called on more than one tensor computed from the input")
                self.unary(n, args[0], leaves if isinstance(leaves, Leaf) else Chain(leaves))
            return
        target = n.target
        name = target if n.op == "call_method" else getattr(target, "__name__", str(target))
        if n.op == "call_function" and target in _ACT_FUNCTIONS or n.op == "call_method" and target in ("relu", "gelu", "tanh"):
            kind = _ACT_FUNCTIONS.get(target, {"relu": "ReLU", "gelu": "GELU", "tanh": "Tanh"}.get(target))
            if kind == "GELU" and n.kwargs.get("approximate", "none") == "tanh":
                kind = "GELUTanh"
            return self.activation(n, args[0], kind)
        if n.op == "call_function" and target in _DROPOUT_FUNCTIONS or n.op == "call_method" and target in ("contiguous", "float", "type_as"):
            self.alias[n] = args[0]
            return
        if n.op == "call_function" and target is F.layer_norm:
            return self.layer_norm(n, args)
        if target in (operator.add, torch.add, operator.iadd) or name == "add":
            return self.join(n, "add", args)
        if target in (operator.mul, torch.mul, operator.imul) or name == "mul":
            return self.join(n, "mul", args)
        if _is_div(target, name):
            if len(args) != 1 or n.args[0] is not args[0] or n.kwargs.get("rounding_mode") is not None:
                return self.fail(n, "a division of the rows is read by a constant alone")
            return self.join(n, "div", args)
        if target is torch.cat:
            return self.cat(n, args)
        if name == "mean" and n.op == "call_method" or target is torch.mean:
            dims = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
            axis = (0, (0,), [0], -3) if self.seq_first else (1, (1,), [1], -2)
            if dims in axis and self.value(args[0]).dim() == 3 and self.key_readings:
                return self.fail(n, "the rows' mean in a model with a key mask: it averages the padded rows too, where stformer's "
                                    "MeanPool averages the rows that exist ((x * m).sum(1) / m.sum(1) is read, m 1 for a row that exists)")
            if dims in axis and self.value(args[0]).dim() == 3:
                d = self.value(args[0]).shape[2]
                return self.unary(n, args[0], Leaf(self.anon("pool"), f"stformer::MeanPool<{d}>", "the rows' mean",
                                                   lambda x: x.mean(dim=1, keepdim=True)))
            return self.fail(n, "a mean over another axis than the rows'")
        if target is operator.getitem:
            return self.getitem(n, args)
        if (n.op == "call_method" and target in _RELABEL_METHODS) or target in _RELABEL_FUNCTIONS:
            before, after = _canonical(self.value(args[0]), self.batch, self.seq_first), _canonical(self.value(n), self.batch, self.seq_first)
            if before is not None and before == after:
                self.alias[n] = args[0]
                return
            shape = (lambda v: tuple(v.shape) if torch.is_tensor(v) else f"{len(v)} parts")
            return self.fail(n, f"reshapes the rows {shape(self.value(args[0]))} into {shape(self.value(n))} outside an attention")
        return self.fail(n, "not an operation stformer_export reads (see docs/pytorch.md)")

    def anon(self, what):
        """The path of a step the module has no name for: none for a step without parameters, else
        what it is and a number."""
        if what in ("act", "pool", "first"):
            return ""
        self.unnamed += 1
        return f"{what}{self.unnamed}"

    def activation(self, n, src, kind):
        d = self.value(src).shape[-1]
        fn = {"ReLU": F.relu, "SiLU": F.silu, "GELU": F.gelu, "GELUTanh": lambda x: F.gelu(x, approximate="tanh"), "Tanh": torch.tanh}[kind]
        self.unary(n, src, Leaf(self.anon("act"), f"stformer::{kind}<{d}>", kind, fn))

    def layer_norm(self, n, args):
        shape = n.args[1] if len(n.args) > 1 else n.kwargs.get("normalized_shape")
        w = n.args[2] if len(n.args) > 2 else n.kwargs.get("weight")
        b = n.args[3] if len(n.args) > 3 else n.kwargs.get("bias")
        eps = n.args[4] if len(n.args) > 4 else n.kwargs.get("eps", 1e-5)
        if w is None or len(shape) != 1 or any(isinstance(a, torch.fx.Node) and a in self.dep for a in (w, b)):
            return self.fail(n, "a layer_norm over the last axis with a weight is read")
        wv = self.r.const(w).detach()
        bv = self.r.const(b).detach() if b is not None else torch.zeros_like(wv)
        path = _prefix([a.target for a in (w, b) if isinstance(a, torch.fx.Node) and a.op == "get_attr"]) or self.anon("norm")
        self.unary(n, args[0], self.norm_leaf(path, wv, bv, eps))

    def norm_leaf(self, path, w, b, eps):
        d = w.shape[0]
        eps32 = float(torch.tensor(eps, dtype=torch.float32))
        written = next(t for t in (f"{eps:g}", f"{eps:.9g}", repr(eps32))
                       if float(torch.tensor(float(t), dtype=torch.float32)) == eps32)
        cpp = f"stformer::LayerNorm<{d}>" if eps32 == float(torch.tensor(1e-5, dtype=torch.float32)) else \
            f"stformer::LayerNorm<{d}, stformer::epsilon({written}f)>"
        return Leaf(path, cpp, f"LayerNorm({d}, eps={eps:.6g})", lambda x: F.layer_norm(x, (d,), w, b, eps), {"weight": w, "bias": b})

    def join(self, n, kind, args):
        a = [x for x in n.args[:2]]
        deps = [x for x in a if isinstance(x, torch.fx.Node) and x in self.dep]
        if len(deps) == 2:
            self.ops[n] = _Op(kind, [self.stream(deps[0]), self.stream(deps[1])])
            return
        src = deps[0]
        other = a[1] if a[0] is src else a[0]
        c = self.r.const(other)
        xv = self.value(src)
        if kind == "div":  # by a constant (join's caller): a product by its inverse
            if torch.is_tensor(c) and c.numel() != 1:
                return self.fail(n, f"a division of the rows by a constant of shape {tuple(c.shape)}")
            kind, c = "mul", 1.0 / float(c)
        rows = _canonical(xv, self.batch, self.seq_first)
        if kind == "add" and torch.is_tensor(c) and c.dim() >= 2 and xv.dim() == 3 and c.shape[-1] == xv.shape[-1] \
                and c.numel() == rows[1] * rows[2] and c.shape[0 if self.seq_first else -2] == rows[1]:
            weight = c.detach().reshape(rows[1], rows[2]).float().clone()
            names = self._names(other)
            path = _prefix(names) if names else self.anon("positions")
            n_rows, d = weight.shape
            return self.unary(n, src, Leaf(path, f"stformer::PositionEmbedding<{n_rows}, {d}>", f"positions ({n_rows}, {d}) added",
                                           lambda x: x + weight[: x.shape[1]], {"weight": weight}))
        if kind == "mul" and torch.is_tensor(c) and c.dim() >= 1 and c.numel() == xv.shape[-1] and c.shape[-1] == xv.shape[-1]:
            gamma = c.detach().reshape(-1).float().clone()
            names = self._names(other)
            prev = self.ops.get(self.stream(src))
            if prev is not None and prev.kind == "unary" and isinstance(prev.leaf, Leaf) and prev.leaf.cpp.startswith("stformer::RMSNorm<") \
                    and torch.equal(prev.leaf.state["weight"], torch.ones_like(gamma)) and len(self.stream(src).users) == 1:
                eps = float(prev.leaf.what.split("eps=")[1].rstrip(")"))
                self.ops[n] = _Op("unary", prev.inputs, self.rms_leaf(_prefix(names) if names else prev.leaf.path, gamma, eps))
                return
            return self.unary(n, src, Leaf(_prefix(names) if names else self.anon("scale"), f"stformer::LayerScale<{gamma.numel()}>",
                                           "a learned scale per feature", lambda x: x * gamma, {"gamma": gamma}))
        if kind == "mul" and (not torch.is_tensor(c) or c.numel() == 1):
            # x·s right after a step linear in its parameters (an embedding's table, a Linear's weight
            # and bias, a norm's weight and bias): the step with its parameters times s
            prev = self.ops.get(self.stream(src))
            scale = float(c)
            if prev is not None and prev.kind == "unary" and isinstance(prev.leaf, Leaf) and len(self.stream(src).users) == 1 \
                    and prev.leaf.cpp.startswith(self.SCALED) and not prev.leaf.attends:
                old = prev.leaf
                state = {k: v * torch.tensor(scale, dtype=torch.float32) for k, v in old.state.items()}
                self.ops[n] = _Op("unary", prev.inputs, Leaf(old.path, old.cpp, f"{old.what}, scaled by {scale:g}",
                                                            lambda x, f=old.fn: f(x) * scale, state))
                return
            return self.fail(n, f"a product by the constant {scale:g} (read right after an nn.Embedding, a Linear or a norm, "
                                "into its parameters)")
        if kind == "mul" and self.key_readings and torch.is_tensor(c) and xv.dim() == 3 and tuple(c.shape) == (*xv.shape[:2], 1):
            column = (c[..., 0].t() if self.seq_first else c[..., 0]).float()  # (B, N): 1 for a row that exists?
            for reading in self.key_readings:  # (after a class token: its row exists)
                if column.shape[1] >= reading[1].shape[1] and torch.equal(column, with_tokens(reading[1], column.shape[1]).float()):
                    self.masked_rows[n] = (self.stream(src), reading)  # read by masked_mean, or refused there
                    return
        return self.fail(n, f"a {kind} of the rows and a constant of shape {tuple(c.shape) if torch.is_tensor(c) else type(c).__name__}")

    def masked_mean(self, n, args):
        """(x · m).sum(rows) / m.sum(rows), m the key mask as a column (1 for a row that exists): the
        mean of the rows that exist, stformer's MeanPool under the pass's key mask."""
        target = n.target
        name = target if n.op == "call_method" else getattr(target, "__name__", str(target))
        src = args[0]
        rows = (0, -3) if self.seq_first else (1, -2)
        if len(args) == 1 and src in self.masked_rows and (name == "sum" or target is torch.sum) and n.args[0] is src:
            dims = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
            dims = dims[0] if isinstance(dims, (tuple, list)) and len(dims) == 1 else dims
            if dims in rows:
                self.masked_sums[n] = self.masked_rows[src]
                return
        if len(args) == 1 and src in self.masked_sums and n.args[0] is src and _is_div(target, name):
            stream, reading = self.masked_sums[src]
            count = self.r.const(n.args[1]) if len(n.args) > 1 else None
            want = with_tokens(reading[1], self.value(stream).shape[0 if self.seq_first else 1]).sum(dim=1).float()
            if torch.is_tensor(count) and count.numel() == want.numel() and torch.equal(count.reshape(-1).float(), want):
                if self.read_keys(n, reading) is None:
                    return False
                d = self.value(stream).shape[-1]

                def pooled(x, keys=reading[1]):
                    k = with_tokens(keys, x.shape[1]).float()[..., None]
                    return (x * k).sum(dim=1, keepdim=True) / k.sum(dim=1, keepdim=True)
                self.ops[n] = _Op("unary", [stream], Leaf(self.anon("pool"), f"stformer::MeanPool<{d}>", "the mean of the rows that exist",
                                                          pooled))
                return
        return self.fail(n, "the rows times the key mask are read in the mean of the rows that exist alone: "
                            "(x * m).sum(1) / m.sum(1), m the key mask (1 for a row that exists) as a column (B, N, 1)")

    # the leaves whose output times a constant is the leaf with its parameters times it
    SCALED = ("stformer::Embedding<", "stformer::Linear<", "stformer::LayerNorm<", "stformer::RMSNorm<")

    def _names(self, node):
        """The module or parameter a constant comes from: its path ("pos_embed", "transformer.wpe"); for a
        parameter of a module, the module's ("blocks.0.ls1" of "blocks.0.ls1.gamma")."""
        names = []
        for x in self._consts(node):
            if x.op == "call_module":
                names.append(x.target)
            elif not x.target.startswith("_tensor_constant"):
                owner, _, leaf = x.target.rpartition(".")
                names.append(owner if owner and leaf in ("gamma", "weight", "scale") else x.target)
            else:  # a slice of a buffer taken outside the trace (self.pe[:n]): the module that holds it
                held = self._holder(self.r.const(x))
                if held:
                    names.append(held[0].rpartition(".")[0] or held[0])
        return names

    def _holder(self, value):
        """The buffers and parameters whose storage a constant lies in (self.pe[:n], taken outside the trace): [(name)]."""
        return [k for k, b in list(self.r.module.named_buffers()) + list(self.r.module.named_parameters())
                if torch.is_tensor(value) and b.numel() and value.numel() and b.storage().data_ptr() == value.storage().data_ptr()]

    def _whole(self, value):
        """A constant, or the whole buffer it is a slice of."""
        held = self._holder(value)
        return self.r.module.get_buffer(held[0]) if held and held[0] in dict(self.r.module.named_buffers()) else value

    def _consts(self, node):
        """The get_attr and module nodes a constant comes from."""
        out, todo, seen = [], [node], set()
        while todo:
            x = todo.pop()
            if not isinstance(x, torch.fx.Node) or x in seen:
                continue
            seen.add(x)
            if x.op in ("get_attr",) or x.op == "call_module":
                out.append(x)
            todo.extend(x.all_input_nodes)
        return out

    def cat(self, n, args):
        parts = n.args[0]
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else 0)
        if len(parts) == 2 and dim in (1, -2) and parts[1] in self.dep and parts[0] not in self.dep:
            c = self.r.const(parts[0])
            xv = self.value(parts[1])
            if torch.is_tensor(c) and c.dim() == 3 and c.shape[1] == 1 and torch.equal(c, c[:1].expand_as(c)):
                d = xv.shape[2]
                token = c[:1].detach().reshape(1, 1, d).float().clone()
                names = [x.target for x in self._consts(parts[0]) if x.op == "get_attr"]
                path = names[0].rsplit(".", 1)[0] if names and "." in names[0] else ""
                leaf = Leaf(path, f"stformer::ClassToken<{d}>", "a class token before the rows",
                            lambda x: torch.cat([token.expand(x.shape[0], -1, -1), x], dim=1), {"cls_token": token})
                return self.unary(n, parts[1], leaf)
        return self.fail(n, "a cat of the rows other than a learned token put before them (ClassToken)"
                         + ("; with a key mask, the key mask is the input's rows' and a class token's" if self.key_readings else ""))

    def getitem(self, n, args):
        idx = n.args[1]
        xv = self.value(args[0])
        if xv.dim() != 3:
            return self.fail(n, f"indexing the rows with {idx!r} (the first row, [:, 0], or the last, [:, -1], is read)")
        rows = xv.shape[0 if self.seq_first else 1]

        def which(i):  # 0: the first row, rows - 1: the last (an index, a slice of that one row, or a list of it: x[:, [-1]])
            if isinstance(i, (list, tuple)) and len(i) == 1 and isinstance(i[0], int):
                i = slice(i[0] % rows, i[0] % rows + 1) if -rows <= i[0] < rows else None
            if isinstance(i, int):
                return i % rows if -rows <= i < rows and i % rows in (0, rows - 1) else None
            if isinstance(i, slice) and i.step in (None, 1):
                start, stop, _ = i.indices(rows)
                return start if stop - start == 1 and start in (0, rows - 1) else None
            return None
        whole = (lambda rest: all(i == slice(None) or i is Ellipsis for i in rest))
        row = None
        if self.seq_first:
            row = which(idx[0]) if isinstance(idx, tuple) and whole(idx[1:]) else which(idx)
        elif isinstance(idx, tuple) and len(idx) >= 2 and idx[0] == slice(None) and whole(idx[2:]):
            row = which(idx[1])
        if row is not None:
            d = xv.shape[2]
            if row == 0:
                return self.unary(n, args[0], Leaf(self.anon("first"), f"stformer::FirstToken<{d}>", "the first row", lambda x: x[:, :1]))
            return self.unary(n, args[0], Leaf(self.anon("first"), f"stformer::LastToken<{d}>", "the last row", lambda x: x[:, -1:]))
        return self.fail(n, f"indexing the rows with {idx!r} (the first row, [:, 0], or the last, [:, -1], is read)")

    # -- structure -------------------------------------------------------------------------------
    def dominators(self):
        order = [n for n in self.r.graph.nodes if n in self.ops]
        dom = {}
        for n in order:
            preds = self.ops[n].inputs
            if not preds:
                dom[n] = {n}
            else:
                common = set.intersection(*(dom[p] for p in preds))
                dom[n] = common | {n}
        return dom

    def regroup(self, end, fork, a, b, steps):
        """(x + p(x)) + q(x) as x + (p(x) + q(x)): a residual over two branches side by side (GPT-J's
        block), the steps both branches begin with (its norm) read once before them. The sum's
        order changes: the result within float rounding of PyTorch's, not its bits."""
        for first, second in ((a, b), (b, a)):
            inner = self.ops.get(first)
            if inner is None or inner.kind != "add" or fork not in inner.inputs or len(first.users) != 1:
                continue
            p = inner.inputs[1] if inner.inputs[0] is fork else inner.inputs[0]
            if p is fork:
                continue
            left, right = self.build(fork, p), self.build(fork, second)
            shared = []
            while left and right and left[0] is right[0]:
                shared.append(left.pop(0))
                right.pop(0)
            if not left or not right:
                self.fail(end, "two branches of which one is the other's beginning")
                return True
            steps.append(Residual(Chain(shared + [Parallel([Chain(left), Chain(right)])])))
            return True
        return False

    def build(self, start, end):
        if not hasattr(self, "_dom"):
            self._dom = self.dominators()
        dom = self._dom
        steps = []
        while end is not start:
            op = self.ops.get(end)
            if op is None or op.kind == "input":
                self.fail(end, "the rows reach here by another way than the input's")
                break
            if op.kind == "unary":
                steps.extend(reversed(op.leaf.steps) if isinstance(op.leaf, Chain) else [op.leaf])
                end = op.inputs[0]
                continue
            fork = max((d for d in dom[end] if d is not end), key=lambda d: len(dom[d]))
            a, b = op.inputs
            if op.kind == "add" and (a is fork or b is fork):
                body = self.build(fork, b if a is fork else a)
                if not body:
                    self.fail(end, "x + x")
                steps.append(Residual(Chain(body)))
            elif op.kind == "add" and self.regroup(end, fork, a, b, steps):
                pass
            else:
                left, right = Chain(self.build(fork, a)), Chain(self.build(fork, b))
                if not left.steps or not right.steps:
                    self.fail(end, f"a {op.kind} of the rows with a function of themselves where one side is the rows as they are")
                steps.append(Parallel([left, right]) if op.kind == "add" else Gated(left, right))
            end = fork
        steps.reverse()
        return steps
