"""stformer_onnx: an ONNX file read as stformer's declaration, as the exporter reads a PyTorch model.

    import stformer_onnx
    stformer_onnx.import_onnx("model.onnx", "name", "folder")    # folder/name.hpp, name.safetensors

(or `src/stformer-import model.onnx NAME FOLDER`). The file is read by the `onnx` package and
checked before anything of it is used (below); its graph is then rebuilt as a PyTorch module, each
node the torch operation of its ONNX meaning, and that module is exported by stformer_export's
tracer: what the graph computes is read exactly as a model written in PyTorch is, and checked the
same way (the declaration, computed step by step as stformer computes it, must give the graph's
output on an example input).

The graphs read are those of the operations stformer_export reads, at opsets 13 to 17, as
torch.onnx.export writes them:
  MatMul by a constant [In, Out] (then Add of a constant [Out]), Gemm      an nn.Linear
  LayerNormalization, or ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div
  then Mul and Add by constants                                            an nn.LayerNorm
  Gather of a constant table by the token ids                              an nn.Embedding
  Conv with kernel = stride on the image input                             an nn.Conv2d
  elementwise nodes of one input around Erf, Tanh or Sigmoid that
  compute GELU (erf or tanh), SiLU or tanh                                 F.gelu, F.silu, torch.tanh
  Relu                                                                     F.relu
  MatMul, Einsum, Softmax, Add, Mul, Div by constants, Where with a
  constant condition (a mask), Reshape, Transpose, Split, Squeeze,
  Unsqueeze, Flatten, Gather of one row, Slice, Concat, Identity, Cast     their torch operations
  and every node whose inputs are constants, or shapes (Shape, Constant, ConstantOfShape, Expand,
  Equal, Range, ...), computed once, as constants. Anything else is refused, each node named.

A file is refused with a clear message, before any of it is used, when it is not an ONNX model
(truncated, corrupted), fails onnx.checker, is of an opset outside 13–17, has a tensor whose dims
are negative or absurd (more than 2^31 elements, or a constant of as many that the graph would
compute) or whose data is not its size, an input of
another type than float32, int64 or int32 or without fixed dims, more than one input or output,
or external data outside the model's folder (a path that is absolute or climbs out of it).
"""
import math
import os

import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

import stformer_export as sx
import stformer_trace as st

_MAX_ELEMENTS = 2 ** 31
_MAX_FILE = 2 ** 31  # protobuf's own limit for one file
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sigmoid", "Sqrt"}
_CORES = {"Erf", "Tanh", "Sigmoid"}


class ImportError_(sx.ExportError):
    """An ONNX file stformer does not import: every reason, one per line."""


# ---------------------------------------------------------------------------------------------
# Reading the file, checked

def _refuse(path, why):
    raise ImportError_(f"stformer_onnx: {path}: {why}")


def load(path):
    """The model of an ONNX file, its external data read from its folder only, checked."""
    if not os.path.isfile(path):
        _refuse(path, "no such file")
    size = os.path.getsize(path)
    if size > _MAX_FILE:
        _refuse(path, f"{size} bytes: larger than one ONNX file can be")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # a truncated or corrupted file: protobuf's DecodeError, and others
        _refuse(path, f"not an ONNX model ({type(e).__name__}: {e})")
    if not model.graph.node:
        _refuse(path, "not an ONNX model (no graph)")
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    if set(opsets) - {"ai.onnx"}:
        _refuse(path, f"operator sets {sorted(set(opsets) - {'ai.onnx'})}: only ONNX's own is read")
    if not 13 <= opsets.get("ai.onnx", 0) <= 17:
        _refuse(path, f"opset {opsets.get('ai.onnx')}: opsets 13 to 17 are read")
    folder = os.path.dirname(os.path.abspath(path))
    for t in model.graph.initializer:
        _check_tensor(path, t)
        if t.data_location == onnx.TensorProto.EXTERNAL:
            _check_external(path, folder, t)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        try:
            onnx.external_data_helper.load_external_data_for_model(model, folder)
        except Exception as e:
            _refuse(path, f"its external data cannot be read ({type(e).__name__}: {e})")
        for t in model.graph.initializer:
            _check_tensor(path, t)
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        _refuse(path, f"fails onnx.checker: {str(e).strip().splitlines()[0]}")
    return model


_DTYPES = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.INT64: 8, onnx.TensorProto.INT32: 4, onnx.TensorProto.BOOL: 1,
           onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.UINT8: 1, onnx.TensorProto.INT8: 1, onnx.TensorProto.FLOAT16: 2}


def _check_tensor(path, t):
    if any(d < 0 for d in t.dims):
        _refuse(path, f"tensor '{t.name}' has dims {list(t.dims)}")
    n = math.prod(t.dims)
    if n > _MAX_ELEMENTS:
        _refuse(path, f"tensor '{t.name}' has dims {list(t.dims)}: {n} elements, absurd")
    if t.data_type not in _DTYPES:
        _refuse(path, f"tensor '{t.name}' of ONNX type {onnx.TensorProto.DataType.Name(t.data_type)}, which stformer does not read")
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return
    if t.raw_data:
        if len(t.raw_data) != n * _DTYPES[t.data_type]:
            _refuse(path, f"tensor '{t.name}' holds {len(t.raw_data)} bytes, but its dims {list(t.dims)} need {n * _DTYPES[t.data_type]}")
        return
    storage = onnx.mapping.TENSOR_TYPE_TO_STORAGE_TENSOR_TYPE[t.data_type]
    have = len(getattr(t, onnx.mapping.STORAGE_TENSOR_TYPE_TO_FIELD[storage]))
    if have != n:
        _refuse(path, f"tensor '{t.name}' holds {have} values, but its dims {list(t.dims)} need {n}")


def _check_external(path, folder, t):
    info = {e.key: e.value for e in t.external_data}
    where = info.get("location", "")
    if not where or os.path.isabs(where):
        _refuse(path, f"tensor '{t.name}': external data at '{where}': only a file in the model's folder is read")
    full = os.path.realpath(os.path.join(folder, where))
    if os.path.commonpath([full, os.path.realpath(folder)]) != os.path.realpath(folder):
        _refuse(path, f"tensor '{t.name}': external data at '{where}' is outside the model's folder: not read")
    if not os.path.isfile(full):
        _refuse(path, f"tensor '{t.name}': external data file '{where}' does not exist")
    offset, length = int(info.get("offset", 0) or 0), info.get("length")
    need = math.prod(t.dims) * _DTYPES[t.data_type]
    if length is not None and int(length) != need:
        _refuse(path, f"tensor '{t.name}': external data of {length} bytes, but its dims {list(t.dims)} need {need}")
    if offset < 0 or offset + need > os.path.getsize(full):
        _refuse(path, f"tensor '{t.name}': external data past the end of '{where}'")


# ---------------------------------------------------------------------------------------------
# The graph as a PyTorch module

def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _module_path(name):
    """A module path from an ONNX name: 'transformer.h.0.attn.c_attn.bias' -> 'transformer.h.0.attn.c_attn';
    '/h.0/attn/c_proj/MatMul' -> 'h.0.attn.c_proj'."""
    if name.startswith("/"):
        parts = [p for p in name.split("/")[1:-1] if p]
        # torch.onnx repeats a list's name in its items' scope ('/blocks/blocks.0/attn'): keep the item's
        out = []
        for p in parts:
            if out and p.startswith(out[-1] + "."):
                out[-1] = p
            else:
                out.append(p)
        return ".".join(out)
    if "::" in name:
        return ""
    return name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name


class _Modules(nn.Module):
    """A container of the graph's modules at their paths (nested, so that the paths are PyTorch's)."""

    def place(self, path, module, fallback):
        parts = [p for p in (path or fallback).split(".") if p]
        at = self
        for i, p in enumerate(parts[:-1]):
            child = at._modules.get(p)
            if child is None or not isinstance(child, _Modules):
                if child is not None:  # a leaf already there: a path of its own
                    return self.place("", module, fallback + str(len(self._modules)))
                child = _Modules()
                at.add_module(p, child)
            at = child
        leaf = parts[-1]
        while leaf in at._modules or leaf in at.__dict__ or hasattr(type(at), leaf):
            leaf += "_"
        at.add_module(leaf, module)
        return ".".join(parts[:-1] + [leaf])


class _RMSNorm(nn.Module):
    """RMSNorm as llama writes it (x * rsqrt(mean(x^2) + eps) * weight), which the tracer reads."""

    def __init__(self, w, eps):
        super().__init__()
        self.weight = nn.Parameter(w.clone())
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class OnnxModule(_Modules):
    """The graph of an ONNX model as a PyTorch module: forward (its inputs: module() makes it of
    the graph's number) runs its nodes in order, each the torch operation of its ONNX meaning;
    nodes of constants only were run once, when it was made."""

    def __init__(self, model, path, output=None):
        super().__init__()
        self._path = path
        g = model.graph
        self._file = os.path.basename(path)
        inits = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy()) for t in g.initializer}
        inputs = [i for i in g.input if i.name not in inits]
        if not 1 <= len(inputs) <= 3:
            _refuse(path, f"{len(inputs)} inputs: one input (two or three with a mask: a causal one or, with key_padding=True, "
                          "a key mask) is read")
        outputs = [o.name for o in g.output]
        if output is None and len(outputs) != 1:
            _refuse(path, f"{len(outputs)} outputs ({', '.join(outputs)}): one is read; name it (import_onnx(..., output='{outputs[0]}'), "
                          f"stformer-import --output {outputs[0]})")
        if output is not None and output not in outputs:
            _refuse(path, f"no output '{output}': its outputs are {', '.join(outputs)}")
        self._x = inputs[0]
        self._extra = [i.name for i in inputs[1:]]  # given in the example: constants of the export (a mask)
        tt = self._x.type.tensor_type
        if tt.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.INT32):
            _refuse(path, f"input '{self._x.name}' of type {onnx.TensorProto.DataType.Name(tt.elem_type)}: float32 or "
                          "token ids (int64, int32) are read")
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if not dims or any(d is None or d <= 0 for d in dims) or math.prod(dims) > _MAX_ELEMENTS:
            _refuse(path, f"input '{self._x.name}' of dims {[d.dim_param or d.dim_value for d in tt.shape.dim]}: "
                          "fixed, positive dims are read (export with a fixed shape)")
        self._shape = tuple(dims)
        self._ids = tt.elem_type != onnx.TensorProto.FLOAT
        self._y = output if output is not None else outputs[0]
        self._extra_types = [(i.type.tensor_type.elem_type, tuple(d.dim_value for d in i.type.tensor_type.shape.dim)) for i in inputs[1:]]
        self._static = dict(inits)  # name -> tensor: every value that does not depend on the input
        self._ops = []  # (node, fn(env) -> None): the nodes that depend on the input, in order
        self._errors = []
        self._producers = {o: n for n in g.node for o in n.output}
        needed, stack = set(), [self._y]  # the nodes the output is computed from: no other is read
        while stack:
            n = self._producers.get(stack.pop())
            if n is not None and id(n) not in needed:
                needed.add(id(n))
                stack.extend(i for i in n.input if i)
        self._nodes = [n for n in g.node if id(n) in needed]
        self._read()
        if self._errors:
            raise ImportError_(f"stformer_onnx: {path} cannot be imported as it stands:\n  " + "\n  ".join(self._errors))

    # -- helpers -------------------------------------------------------------------------------
    def where(self, node):
        return f"node '{node.name or node.output[0]}' ({node.op_type})"

    def fail(self, node, why):
        self._errors.append(f"{self.where(node)} of {self._file}: {why}")

    def _read(self):
        """The nodes of constants computed; the others read, those that make one module or function
        (fusions) first, each emitted where its last node was."""
        self._users = {}
        for n in self._nodes:
            for i in n.input:
                self._users.setdefault(i, []).append(n)
        self._users.setdefault(self._y, []).append(None)
        dynamic, order = {self._x.name, *self._extra}, []
        for n in self._nodes:
            if any(i in dynamic for i in n.input if i):
                dynamic.update(n.output)
                order.append(n)
            else:
                self._constant(n)
        fused, emit = set(), {}  # ids of the nodes inside a fusion; id(node) -> fn emitted in its place
        for n in order:
            if id(n) not in fused:
                got = self._fuse(n, fused)
                if got is not None:
                    at, fn = got
                    emit[id(at)] = fn
        for n in order:
            if id(n) in emit:
                self._ops.append((n, emit[id(n)]))
            elif id(n) not in fused:
                self._node(n)

    def _constant(self, n):
        """A node of constants only: computed now."""
        try:
            values = _run(n, [self._static[i] if i else None for i in n.input], _attrs(n))
        except KeyError as e:
            return self.fail(n, f"reads {e}, which no node or initializer gives")
        except NotImplementedError as e:
            return self.fail(n, str(e))
        except Exception as e:  # constants a file made to break it: shapes that do not fit, ...
            return self.fail(n, f"cannot be computed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        for name, v in zip(n.output, values):
            self._static[name] = v

    def _is_static(self, name):
        return name in self._static

    def _only_user(self, name):
        users = self._users.get(name, [])
        return users[0] if len(users) == 1 else None

    # -- fusions: the nodes that make one PyTorch module or function --------------------------------
    def _fuse(self, n, fused):
        """(the node to emit it at, fn) for a fusion that begins at n, its nodes added to fused; None."""
        if n.op_type in ("MatMul", "Gemm"):
            return self._linear(n, fused)
        if n.op_type == "ReduceMean":
            return self._layer_norm_parts(n, fused) or self._rms_norm_parts(n, fused)
        if n.op_type in _CORES:
            return self._activation(n, fused)
        return None

    def _linear(self, n, fused):
        """MatMul(x, W [In, Out]) then Add(b [Out]), or Gemm(x, W, b): an nn.Linear."""
        a = _attrs(n)
        if len(n.input) < 2 or not self._is_static(n.input[1]) or self._is_static(n.input[0]):
            return None
        w = self._static[n.input[1]].float()
        if w.dim() != 2:
            return None
        if n.op_type == "Gemm":
            if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
                return None
            w = w if a.get("transB", 0) else w.t()
            bias = self._static.get(n.input[2]).float().reshape(-1) if len(n.input) > 2 and n.input[2] else None
            out, last, bname = n.output[0], n, n.input[2] if len(n.input) > 2 else ""
        else:
            w = w.t()
            bias, out, last, bname = None, n.output[0], n, ""
            add = self._only_user(n.output[0])
            if add is not None and add.op_type == "Add":
                other = [i for i in add.input if i != n.output[0]]
                if len(other) == 1 and self._is_static(other[0]) and self._static[other[0]].numel() == w.shape[0] \
                        and self._static[other[0]].dim() == 1:
                    bias, out, last, bname = self._static[other[0]].float(), add.output[0], add, other[0]
        lin = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None)
        with torch.no_grad():
            lin.weight.copy_(w)
            if bias is not None:
                lin.bias.copy_(bias.reshape(-1))
        self.place(_module_path(bname) or _module_path(n.name), lin, "linear")
        fused.update({id(n), id(last)})
        return last, lambda env, m=lin, x=n.input[0], o=out: env.__setitem__(o, m(env[x]))

    def _layer_norm_parts(self, mean, fused):
        """ReduceMean(x) .. Div, then Mul(w) and Add(b): LayerNorm written out (opsets before 17)."""
        x = mean.input[0]
        sub = next((u for u in self._users.get(mean.output[0], []) if u is not None and u.op_type == "Sub"
                    and u.input[0] == x and u.input[1] == mean.output[0]), None)
        if sub is None or _attrs(mean).get("axes") not in ([-1],):
            return None
        users = [u for u in self._users.get(sub.output[0], []) if u is not None]
        pow_ = next((u for u in users if u.op_type == "Pow" and self._is_static(u.input[1]) and float(self._static[u.input[1]]) == 2), None)
        div = next((u for u in users if u.op_type == "Div" and u.input[0] == sub.output[0]), None)
        if pow_ is None or div is None or len(users) != 2:
            return None
        var = self._only_user(pow_.output[0])
        add = var and self._only_user(var.output[0])
        sqrt = add and self._only_user(add.output[0])
        if not (var and var.op_type == "ReduceMean" and _attrs(var).get("axes") == [-1] and add and add.op_type == "Add"
                and sqrt and sqrt.op_type == "Sqrt" and div.input[1] == sqrt.output[0]):
            return None
        eps = next((float(self._static[i]) for i in add.input if self._is_static(i)), None)
        mul = self._only_user(div.output[0])
        if eps is None or mul is None or mul.op_type != "Mul":
            return None
        wname = next((i for i in mul.input if self._is_static(i)), None)
        if wname is None:
            return None
        w = self._static[wname].float().reshape(-1)
        last, b = mul, torch.zeros_like(w)
        badd = self._only_user(mul.output[0])
        if badd is not None and badd.op_type == "Add":
            other = [i for i in badd.input if i != mul.output[0]]
            if len(other) == 1 and self._is_static(other[0]) and self._static[other[0]].numel() == w.numel():
                last, b = badd, self._static[other[0]].float().reshape(-1)
        fused.update(id(m) for m in (mean, sub, pow_, var, add, sqrt, div, mul, last))
        return last, self._norm(mean, x, last.output[0], w, b, eps, wname)

    def _rms_norm_parts(self, mean, fused):
        """Pow(x, 2), ReduceMean, Add(eps), Sqrt, Div(1, ·) or Reciprocal, Mul by x, then Mul(w): RMSNorm
        written out, computed as the tracer reads it (x * rsqrt(mean(x^2) + eps) * weight)."""
        pow_ = self._producers.get(mean.input[0])
        if pow_ is None or pow_.op_type != "Pow" or not self._is_static(pow_.input[1]) or float(self._static[pow_.input[1]]) != 2 \
                or _attrs(mean).get("axes") != [-1]:
            return None
        x = pow_.input[0]
        add = self._only_user(mean.output[0])
        sqrt = add and add.op_type == "Add" and self._only_user(add.output[0])
        inv = sqrt and sqrt.op_type == "Sqrt" and self._only_user(sqrt.output[0])
        if not inv or not (inv.op_type == "Reciprocal" or inv.op_type == "Div" and self._is_static(inv.input[0])
                           and float(self._static[inv.input[0]]) == 1):
            return None
        eps = next((float(self._static[i]) for i in add.input if self._is_static(i)), None)
        mul = self._only_user(inv.output[0])
        if eps is None or mul is None or mul.op_type != "Mul" or x not in mul.input:
            return None
        w, wname, last = None, "", mul
        scale = self._only_user(mul.output[0])
        if scale is not None and scale.op_type == "Mul":
            other = [i for i in scale.input if i != mul.output[0]]
            if len(other) == 1 and self._is_static(other[0]) and self._static[other[0]].dim() == 1:
                w, wname, last = self._static[other[0]].float(), other[0], scale
        if w is None:
            return None
        norm = _RMSNorm(w, eps)
        self.place(_module_path(wname) or _module_path(mean.name), norm, "rms")
        fused.update(id(m) for m in (pow_, mean, add, sqrt, inv, mul, last))
        return last, lambda env, m=norm, x=x, o=last.output[0]: env.__setitem__(o, m(env[x]))

    def _norm(self, node, x, out, w, b, eps, wname):
        ln = nn.LayerNorm(w.numel(), eps=eps)
        with torch.no_grad():
            ln.weight.copy_(w)
            ln.bias.copy_(b)
        self.place(_module_path(wname) or _module_path(node.name), ln, "norm")
        return lambda env, m=ln, x=x, o=out: env.__setitem__(o, m(env[x]))

    def _activation(self, core, fused):
        """Elementwise nodes of one input x around Erf, Tanh or Sigmoid: the activation they compute,
        found by computing them on values of x (GELU, its tanh form, SiLU, tanh)."""
        nodes, source = self._ancestry(core)
        if source is None:
            return None
        island = list(nodes) + [core]
        names = {o for n in island for o in n.output}
        # grow forward: elementwise nodes whose other inputs are x, the island's values or scalars
        grown = True
        while grown:
            grown = False
            for name in list(names):
                for u in self._users.get(name, []):
                    if u is None or u in island or u.op_type not in _ELEMENTWISE:
                        continue
                    if all(i in names or i == source or (self._is_static(i) and self._static[i].numel() == 1) for i in u.input):
                        island.append(u)
                        names.update(u.output)
                        grown = True
        order = [n for n in self._nodes if n in island]
        probe = torch.linspace(-6, 6, 2001)
        values = {source: probe}
        for n in order:
            values.update(zip(n.output, _run(n, [values.get(i, self._static.get(i)) for i in n.input], _attrs(n))))
        candidates = {"GELU": F.gelu(probe), "GELUTanh": F.gelu(probe, approximate="tanh"), "SiLU": F.silu(probe),
                      "Tanh": torch.tanh(probe)}
        best = None
        for n in order:  # the last value that is one of them, computed from the island's nodes before it
            for kind, want in candidates.items():
                if float((values[n.output[0]] - want).abs().max()) <= 1e-5:
                    best = (n, kind)
        if best is None:
            return None
        exit_, kind = best
        needed = self._needed(exit_, island, source)
        for n in needed:
            if n is not exit_ and any(u not in needed for u in self._users.get(n.output[0], [])):
                return None  # a value inside it is used elsewhere: left as it is
        fused.update(id(m) for m in needed)
        fn = {"GELU": F.gelu, "GELUTanh": lambda v: F.gelu(v, approximate="tanh"), "SiLU": F.silu, "Tanh": torch.tanh}[kind]
        return exit_, lambda env, fn=fn, x=source, o=exit_.output[0]: env.__setitem__(o, fn(env[x]))

    def _ancestry(self, core):
        """The elementwise nodes before core back to one input value: (nodes, that value) or (, None)."""
        producers = self._producers
        nodes, sources, todo = [], set(), [core.input[0]]
        while todo:
            name = todo.pop()
            p = producers.get(name)
            if p is not None and p.op_type in _ELEMENTWISE and not self._is_static(name) and \
                    all(self._is_static(i) and self._static[i].numel() == 1 or not self._is_static(i) for i in p.input):
                if p not in nodes:
                    nodes.append(p)
                    todo.extend(i for i in p.input if not self._is_static(i))
            else:
                sources.add(name)
        return (nodes, sources.pop()) if len(sources) == 1 else ([], None)

    def _needed(self, exit_, island, source):
        """The island's nodes exit_ is computed from."""
        producers = {o: n for n in island for o in n.output}
        need, todo = [], [exit_]
        while todo:
            n = todo.pop()
            if n in need:
                continue
            need.append(n)
            todo.extend(producers[i] for i in n.input if i in producers)
        return need

    # -- one node ------------------------------------------------------------------------------
    def _node(self, n):
        a = _attrs(n)
        op = n.op_type
        if op == "Gather" and self._is_static(n.input[0]) and n.input[1] == self._x.name and self._ids:
            table = self._static[n.input[0]].float()
            emb = nn.Embedding(table.shape[0], table.shape[1])
            with torch.no_grad():
                emb.weight.copy_(table)
            self.place(_module_path(n.input[0]) or _module_path(n.name), emb, "embedding")
            self._ops.append((n, lambda env, m=emb, x=n.input[1], o=n.output[0]: env.__setitem__(o, m(env[x]))))
            return
        if op == "LayerNormalization":
            if len(n.input) < 2 or not self._is_static(n.input[1]) or (len(n.input) > 2 and n.input[2] and not self._is_static(n.input[2])) \
                    or a.get("axis", -1) != -1:
                return self.fail(n, "a LayerNormalization over the last axis with constant weight and bias is read")
            w = self._static[n.input[1]].float().reshape(-1)
            b = self._static[n.input[2]].float().reshape(-1) if len(n.input) > 2 and n.input[2] else torch.zeros_like(w)
            self._ops.append((n, self._norm(n, n.input[0], n.output[0], w, b, a.get("epsilon", 1e-5), n.input[1])))
            return
        if op == "Conv":
            if not self._is_static(n.input[1]) or n.input[0] != self._x.name:
                return self.fail(n, "a Conv is read on the image input alone, as a patch embedding")
            w = self._static[n.input[1]].float()
            if w.dim() != 4 or a.get("group", 1) != 1 or any(a.get("pads", [0])) or a.get("strides") != a.get("kernel_shape", list(w.shape[2:])) \
                    or any(d != 1 for d in a.get("dilations", [1, 1])):
                return self.fail(n, "a Conv other than a patch embedding (kernel = stride, no padding, dilation or groups)")
            conv = nn.Conv2d(w.shape[1], w.shape[0], tuple(w.shape[2:]), stride=tuple(w.shape[2:]), bias=len(n.input) > 2)
            with torch.no_grad():
                conv.weight.copy_(w)
                if len(n.input) > 2:
                    conv.bias.copy_(self._static[n.input[2]].float())
            self.place(_module_path(n.input[1]) or _module_path(n.name), conv, "conv")
            self._ops.append((n, lambda env, m=conv, x=n.input[0], o=n.output[0]: env.__setitem__(o, m(env[x]))))
            return
        if op not in _DYNAMIC:
            return self.fail(n, f"{op} is not an operation stformer_onnx reads (see docs/pytorch.md)")
        ins = list(n.input)

        def run(env, n=n, ins=ins, a=a):
            values = _run(n, [env[i] if i in env else self._static.get(i) if i else None for i in ins], a)
            env.update(zip(n.output, values))
        self._ops.append((n, run))

    def run(self, x, *extra):
        env = {self._x.name: x, **dict(zip(self._extra, extra))}
        for node, fn in self._ops:
            st.SOURCE = f"{self._file}: {self.where(node)}"
            try:
                fn(env)
            finally:
                st.SOURCE = None
        return env[self._y]


# forward of one, two or three inputs (torch.fx reads the signature): the graph's own number
class _One(OnnxModule):
    def forward(self, x):
        return self.run(x)


class _Two(OnnxModule):
    def forward(self, x, a):
        return self.run(x, a)


class _Three(OnnxModule):
    def forward(self, x, a, b):
        return self.run(x, a, b)


def module(model, path, output=None):
    """The graph as a PyTorch module (OnnxModule) whose forward takes the graph's inputs and gives
    its output (output: which, for a graph of several)."""
    inits = {t.name for t in model.graph.initializer}
    count = len([i for i in model.graph.input if i.name not in inits])
    return {1: _One, 2: _Two}.get(count, _Three)(model, path, output)


def _mask_example(module_, mask, path):
    """The example of a graph's second input: mask "causal" (N, N), the additive -inf triangle
    above the diagonal for a float input, True above it for a bool one; or "keys" (B, N), the
    rows' key mask with the later rows of every other sequence padding (True for padding for a
    bool input, 1 for a token for a number)."""
    if len(module_._extra) != 1:
        raise ImportError_(f"stformer_onnx: {os.path.basename(path)}: --{mask}-mask reads a graph of two inputs, "
                           f"not {1 + len(module_._extra)}")
    elem, dims = module_._extra_types[0]
    boolean = elem == onnx.TensorProto.BOOL
    if mask == "causal":
        if len(dims) != 2 or dims[0] != dims[1]:
            raise ImportError_(f"stformer_onnx: {os.path.basename(path)}: input '{module_._extra[0]}' of dims {list(dims)} is not a "
                               "causal mask (N, N)")
        n = dims[0]
        above = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        return above if boolean else torch.zeros(n, n).masked_fill(above, float("-inf"))
    if len(dims) != 2:
        raise ImportError_(f"stformer_onnx: {os.path.basename(path)}: input '{module_._extra[0]}' of dims {list(dims)} is not a "
                           "key mask (B, N)")
    rows = dims[1]
    token = torch.ones(dims, dtype=torch.bool)
    for i in range(0, dims[0], 2):
        token[i, max(1, rows // 2):] = False
    dtype = {onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.INT32: torch.int32}.get(elem)
    if boolean:
        return ~token
    if dtype is None:
        raise ImportError_(f"stformer_onnx: {os.path.basename(path)}: input '{module_._extra[0]}' of ONNX type "
                           f"{onnx.TensorProto.DataType.Name(elem)}: a key mask of bool, float, int64 or int32 is read")
    return token.to(dtype)


# ---------------------------------------------------------------------------------------------
# The operations, on tensors (constants) and on the tracer's values alike

def _ints(v):
    return [int(i) for i in (v.tolist() if torch.is_tensor(v) else v)]


def _reshape(x, shape, allowzero=0):
    shape = _ints(shape)
    if not allowzero:
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(*shape)


def _gather(x, idx, axis):
    if torch.is_tensor(idx) and idx.dim() == 0 or isinstance(idx, int):
        return x[(slice(None),) * (axis % x.dim()) + (int(idx),)]
    if not torch.is_tensor(x) or isinstance(x, torch.fx.Proxy):
        raise NotImplementedError("a Gather of several rows of a value computed from the input is not read")
    idx = idx.long()
    idx = torch.where(idx < 0, idx + x.shape[axis], idx)  # ONNX's Gather counts from the end below 0
    return torch.index_select(x, axis, idx.reshape(-1)).reshape(*x.shape[:axis % x.dim()], *idx.shape,
                                                                      *x.shape[axis % x.dim() + 1:])


def _slice(x, starts, ends, axes=None, steps=None):
    starts, ends = _ints(starts), _ints(ends)
    axes = _ints(axes) if axes is not None else list(range(len(starts)))
    steps = _ints(steps) if steps is not None else [1] * len(starts)
    idx = [slice(None)] * x.dim()
    for s, e, ax, step in zip(starts, ends, axes, steps):
        n = x.shape[ax]
        e = min(e, n) if e >= 0 else e
        idx[ax] = slice(s, e, step)
    return x[tuple(idx)]


def _split(x, split, axis, outputs):
    if split is None:
        size = x.shape[axis] // outputs
        return torch.split(x, size, dim=axis)
    return torch.split(x, _ints(split), dim=axis)


def _where(cond, a, b):
    if torch.is_tensor(cond) and not isinstance(cond, torch.fx.Proxy) and torch.is_tensor(a) and not isinstance(a, torch.fx.Proxy) \
            and a.numel() == 1:
        return b.masked_fill(cond.bool(), float(a))
    if torch.is_tensor(cond) and not isinstance(cond, torch.fx.Proxy) and torch.is_tensor(b) and not isinstance(b, torch.fx.Proxy) \
            and b.numel() == 1:
        return a.masked_fill(~cond.bool(), float(b))
    return torch.where(cond.bool(), a, b)


_TYPES = {1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool, 11: torch.float64}

_OPS = {
    "Identity": lambda i, a: [i[0]],
    "Add": lambda i, a: [i[0] + i[1]],
    "Sub": lambda i, a: [i[0] - i[1]],
    "Mul": lambda i, a: [i[0] * i[1]],
    "Div": lambda i, a: [i[0] / i[1] if i[0].dtype.is_floating_point or i[1].dtype.is_floating_point
                         else torch.div(i[0], i[1], rounding_mode="trunc")],
    "Pow": lambda i, a: [i[0] ** i[1]],
    "Sqrt": lambda i, a: [torch.sqrt(i[0])],
    "Erf": lambda i, a: [torch.erf(i[0])],
    "Tanh": lambda i, a: [torch.tanh(i[0])],
    "Sigmoid": lambda i, a: [torch.sigmoid(i[0])],
    "Relu": lambda i, a: [F.relu(i[0])],
    "Neg": lambda i, a: [-i[0]],
    "Reciprocal": lambda i, a: [torch.reciprocal(i[0])],
    "MatMul": lambda i, a: [torch.matmul(i[0], i[1])],
    "Einsum": lambda i, a: [torch.einsum(a["equation"].decode() if isinstance(a["equation"], bytes) else a["equation"], *i)],
    "Softmax": lambda i, a: [torch.softmax(i[0], dim=a.get("axis", -1))],
    "Transpose": lambda i, a: [i[0].permute(*a["perm"]) if "perm" in a else i[0].permute(*reversed(range(i[0].dim())))],
    "Reshape": lambda i, a: [_reshape(i[0], i[1], a.get("allowzero", 0))],
    "Flatten": lambda i, a: [i[0].flatten(a.get("axis", 1)) if a.get("axis", 1) > 0 else i[0].reshape(1, -1)],
    "Squeeze": lambda i, a: [_squeeze(i[0], _ints(i[1])) if len(i) > 1 and i[1] is not None else i[0].squeeze()],
    "Unsqueeze": lambda i, a: [_unsqueeze(i[0], _ints(i[1]))],
    "Split": lambda i, a, n=None: list(_split(i[0], i[1] if len(i) > 1 else a.get("split"), a.get("axis", 0), a["__outputs"])),
    "Concat": lambda i, a: [torch.cat(list(i), dim=a["axis"])],
    "Gather": lambda i, a: [_gather(i[0], i[1], a.get("axis", 0))],
    "Slice": lambda i, a: [_slice(i[0], *i[1:])],
    "Where": lambda i, a: [_where(i[0], i[1], i[2])],
    "Cast": lambda i, a: [i[0].to(_TYPES[a["to"]]) if a["to"] in _TYPES else None],
    # constants and shapes
    "Constant": lambda i, a: [_constant(a)],
    "Shape": lambda i, a: [torch.tensor(list(i[0].shape), dtype=torch.int64)],
    "ConstantOfShape": lambda i, a: [torch.full(_ints(i[0]), float(_constant(a)) if a else 0.0,
                                                dtype=(_constant(a).dtype if a else torch.float32))],
    "Expand": lambda i, a: [i[0].expand(*torch.broadcast_shapes(tuple(i[0].shape), tuple(_ints(i[1]))))],
    "Equal": lambda i, a: [torch.eq(i[0], i[1])],
    "Not": lambda i, a: [torch.logical_not(i[0])],
    "Range": lambda i, a: [torch.arange(i[0].item(), i[1].item(), i[2].item())],
    "Trilu": lambda i, a: [torch.triu(i[0], int(i[1]) if len(i) > 1 and i[1] is not None else 0) if a.get("upper", 1)
                           else torch.tril(i[0], int(i[1]) if len(i) > 1 and i[1] is not None else 0)],
    "ReduceMean": lambda i, a: [i[0].mean(dim=tuple(a["axes"]), keepdim=bool(a.get("keepdims", 1)))],
}
# read on values computed from the input (the others only as constants)
_DYNAMIC = {"Identity", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Tanh", "Sigmoid", "Relu", "MatMul", "Einsum", "Softmax",
            "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Split", "Concat", "Gather", "Slice", "Where", "Cast", "Shape"}


def _squeeze(x, axes):
    for ax in sorted((a % x.dim() for a in axes), reverse=True):
        x = x.squeeze(ax)
    return x


def _unsqueeze(x, axes):
    for ax in sorted(a % (x.dim() + len(axes)) for a in axes):
        x = x.unsqueeze(ax)
    return x


def _constant(a):
    if "value" in a:
        return torch.from_numpy(onnx.numpy_helper.to_array(a["value"]).copy())
    for k in ("value_float", "value_int"):
        if k in a:
            return torch.tensor(a[k])
    for k in ("value_floats", "value_ints"):
        if k in a:
            return torch.tensor(list(a[k]))
    raise NotImplementedError("a Constant of another form than a tensor or numbers")


def _run(node, inputs, attrs):
    op = node.op_type
    if op not in _OPS:
        raise NotImplementedError(f"{op} is not an operation stformer_onnx reads (see docs/pytorch.md)")
    if op in ("ConstantOfShape", "Expand", "Range"):  # a size read from the file's values: held to the tensors' bound
        size = (math.prod(_ints(inputs[0])) if op == "ConstantOfShape" else
                math.prod(torch.broadcast_shapes(tuple(inputs[0].shape), tuple(_ints(inputs[1])))) if op == "Expand" else
                abs((float(inputs[1]) - float(inputs[0])) / (float(inputs[2]) or 1)))
        if size > _MAX_ELEMENTS:
            raise NotImplementedError(f"a {op} of {size:.0f} elements: absurd")
    attrs = dict(attrs, __outputs=len(node.output))
    if op == "Cast" and attrs["to"] not in _TYPES:
        raise NotImplementedError(f"a Cast to ONNX type {attrs['to']}")
    if op == "Cast" and isinstance(inputs[0], torch.fx.Proxy):
        return [inputs[0].float() if attrs["to"] == 1 else inputs[0]]
    return list(_OPS[op](inputs, attrs))


# ---------------------------------------------------------------------------------------------

def import_onnx(path, name, folder, example=None, output=None, mask=None, **kw):
    """Writes folder/name.hpp and folder/name.safetensors (and name.example.safetensors) from the
    ONNX file at path, as stformer_export.export writes them from a PyTorch module; returns the
    header's path. example: an input of the graph's shape (by default drawn: rows from N(0, 1), or
    token ids below the vocabulary of the first Gather's table); for a graph of more inputs, all
    of them as a tuple, as stformer_export.export takes them (the input, then a causal mask, or
    a key mask with key_padding=True). output: the graph's output to read, for a graph of several.
    mask: "causal" or "keys", a graph of two inputs whose second is a causal mask or a key mask
    whose example is drawn here (_mask_example; "keys" is key_padding=True). kw:
    stformer_export.export's."""
    model = load(path)
    module_ = module(model, path, output)
    if mask not in (None, "causal", "keys"):
        raise ValueError(f"stformer_onnx: mask={mask!r}: None, 'causal' or 'keys'")
    if module_._extra and example is None and mask is None:
        raise ImportError_(f"stformer_onnx: {os.path.basename(path)}: its inputs after the first ({', '.join(module_._extra)}) "
                           "are given in the example (import_onnx(..., example=(x, mask))), or drawn as a causal mask or a "
                           "key mask (stformer-import --causal-mask or --key-mask)")
    if mask == "keys":
        kw["key_padding"] = True
    if example is None:
        torch.manual_seed(0)
        if module_._ids:
            vocabulary = min((m.num_embeddings for m in module_.modules() if isinstance(m, nn.Embedding)), default=2)
            example = torch.randint(0, vocabulary, module_._shape)
        else:
            example = torch.randn(*module_._shape)
        if mask is not None:
            example = (example, _mask_example(module_, mask, path))
    try:
        return sx.export(module_, example, name, folder, **kw)
    except sx.ExportError as e:
        raise ImportError_(str(e).replace("stformer_export:", f"stformer_onnx: {os.path.basename(path)}:", 1)) from None


USAGE = "usage: stformer-import MODEL.onnx NAME FOLDER [--output NAME] [--causal-mask | --key-mask] [--sequence-first]"

if __name__ == "__main__":
    import argparse
    import sys

    class _Args(argparse.ArgumentParser):
        def error(self, message):
            print(f"{USAGE}\nstformer-import: {message}", file=sys.stderr)
            sys.exit(2)
    cli = _Args(prog="stformer-import", usage=USAGE)
    cli.add_argument("model")
    cli.add_argument("name")
    cli.add_argument("folder")
    cli.add_argument("--output", help="the graph's output to read, for a graph of several")
    masks = cli.add_mutually_exclusive_group()
    masks.add_argument("--causal-mask", action="store_true", help="the graph's second input is a causal mask (N, N)")
    masks.add_argument("--key-mask", action="store_true", help="the graph's second input is the rows' key mask (B, N)")
    cli.add_argument("--sequence-first", action="store_true", help="the graph's rows are (N, B, D) (PyTorch's batch_first=False)")
    a = cli.parse_args()
    try:
        print(import_onnx(a.model, a.name, a.folder, output=a.output, mask="causal" if a.causal_mask else "keys" if a.key_mask else None,
                          **({"batch_first": False} if a.sequence_first else {})))
    except sx.ExportError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
