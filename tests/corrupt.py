#!/usr/bin/env python3
"""Corrupted variants of a valid safetensors checkpoint, for tests that every loader refuses them.

Usage: corrupt.py CHECKPOINT OUTDIR [--seed N] [--per-category K] [--levels format,model,int8]

Writes OUTDIR/<level>.<category>.<what was done>.safetensors, one file per variant. Every
variant is something a correct loader of the checkpoint's model refuses, so a command that
exits 0 on one has failed. The level says who must refuse it:
  format  any safetensors reader: truncations, a damaged header (JSON, types, lengths,
          data_offsets), an unknown dtype, duplicate keys;
  model   a loader of this model: a tensor missing or extra, its dtype or shape changed, a NaN
          or an infinity in an F32 parameter;
  int8    a loader of a quantized model (`*.weight` I8, `*.bias` I32, `*.requant.multiplier` I32,
          `*.requant.shift` I32, `*scale` F32): values out of the ranges its integer passes
          assume (a bias of INT32_MAX, a weight of -128, a multiplier below 2^30 or negative, a
          shift of 40, a scale of 0 or 1e30 ...), and multipliers and shifts inside them that are
          not the ones the stored scales give (a multiplier of 0, of 2^31 - 1 or one step off, a
          shift of -31 or one step off).
Model- and int8-level variants change parameters only: tensors outside the reserved "optim."
and "state." namespaces (optimiser and run state, which evaluation does not read).

The tensors changed are the first and the last parameter and one drawn from --seed's generator,
so the same checkpoint and seed give the same files. --per-category K keeps at most K variants
of each category (drawn from the same generator), for large checkpoints.
Standard library only.
"""
import argparse
import json
import math
import os
import random
import re
import struct
import sys

DTYPE_SIZE = {'BOOL': 1, 'U8': 1, 'I8': 1, 'F8_E5M2': 1, 'F8_E4M3': 1, 'U16': 2, 'I16': 2, 'F16': 2, 'BF16': 2,
              'U32': 4, 'I32': 4, 'F32': 4, 'U64': 8, 'I64': 8, 'F64': 8}
INT32_MAX, INT32_MIN = 2**31 - 1, -2**31


class Checkpoint:
    """A parsed safetensors file: metadata and tensors (name, dtype, shape, bytes) in offset order."""

    def __init__(self, raw):
        n = struct.unpack('<Q', raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        self.raw, self.n, self.header = raw, n, header
        self.data = raw[8 + n:]
        self.metadata = header.get('__metadata__')
        entries = [(k, v) for k, v in header.items() if k != '__metadata__']
        entries.sort(key=lambda kv: kv[1]['data_offsets'][0])
        self.tensors = [[k, v['dtype'], list(v['shape']), self.data[v['data_offsets'][0]:v['data_offsets'][1]]] for k, v in entries]

    def params(self):
        return [t for t in self.tensors if not t[0].startswith(('optim.', 'state.'))]


def header_json(metadata, tensors, offsets=None):
    """The header object of `tensors` laid out in order (or at `offsets`), as a dict."""
    h = {}
    if metadata is not None:
        h['__metadata__'] = metadata
    at = 0
    for i, (name, dtype, shape, data) in enumerate(tensors):
        h[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': offsets[i] if offsets else [at, at + len(data)]}
        at += len(data)
    return h


class Blob:
    """A file's bytes as the pieces it is written from: a variant of a large checkpoint is not
    copied whole before it is written, and only the ones written are ever joined."""

    def __init__(self, *parts):
        self.parts = [q for p in parts for q in (p.parts if isinstance(p, Blob) else [p])]

    def bytes(self):
        return b''.join(self.parts)


def pack(header_text, data, length=None):
    """A file: 8-byte length, the header text padded with spaces to 8 bytes, the data (bytes, a
    Blob, or a list of pieces)."""
    j = header_text.encode() if isinstance(header_text, str) else header_text
    j += b' ' * (-len(j) % 8)
    return Blob(struct.pack('<Q', len(j) if length is None else length), j, *(data if isinstance(data, list) else [data]))


def build(metadata, tensors):
    return pack(json.dumps(header_json(metadata, tensors)), [t[3] for t in tensors])


def with_tensor(ck, name, dtype=None, shape=None, data=None):
    """The checkpoint rebuilt with one tensor's dtype, shape or bytes replaced."""
    out = []
    for t in ck.tensors:
        if t[0] == name:
            t = [t[0], dtype or t[1], shape if shape is not None else t[2], data if data is not None else t[3]]
        out.append(t)
    return build(ck.metadata, out)


def set_elements(t, fmt, values):
    """A tensor's bytes with its first elements set to `values` (struct format `fmt`), and its last to the last value."""
    b = bytearray(t[3])
    size = struct.calcsize(fmt)
    count = len(b) // size
    for i, v in enumerate(values[:count]):
        b[i * size:(i + 1) * size] = struct.pack(fmt, v)
    b[(count - 1) * size:count * size] = struct.pack(fmt, values[-1])
    return bytes(b)


def safe(name):
    return re.sub(r'[^A-Za-z0-9_.-]', '_', name)[:80]


def variants(ck, rng):
    """Yields (level, category, label, bytes)."""
    raw, n, data = memoryview(ck.raw), ck.n, ck.data  # slices of the file are views, not copies
    text = bytes(raw[8:8 + n]).decode().rstrip(' ')
    first = ck.tensors[0]

    # ---- format: any safetensors reader refuses these -----------------------------------
    yield 'format', 'truncated', 'empty_file', b''
    yield 'format', 'truncated', '7_bytes', raw[:7]
    yield 'format', 'truncated', 'header_half', raw[:8 + n // 2]
    yield 'format', 'truncated', 'header_last_byte', raw[:8 + len(text) - 1]
    if data:
        yield 'format', 'truncated', 'data_all', raw[:8 + n]
        yield 'format', 'truncated', 'data_half', raw[:8 + n + len(data) // 2]
        yield 'format', 'truncated', 'data_last_byte', raw[:-1]
    yield 'format', 'header_length', 'past_the_file', Blob(struct.pack('<Q', len(raw)), raw[8:])
    yield 'format', 'header_length', 'huge_2e63', Blob(struct.pack('<Q', 2**63), raw[8:])
    yield 'format', 'header_length', 'max_u64', Blob(struct.pack('<Q', 2**64 - 1), raw[8:])
    yield 'format', 'header_length', 'zero', Blob(struct.pack('<Q', 0), raw[8:])
    yield 'format', 'header_length', 'cuts_the_json', Blob(struct.pack('<Q', len(text) - 1), raw[8:])
    if data[:8].strip(b' \t\r\n'):  # the first data bytes read as header: not JSON whitespace
        yield 'format', 'header_length', 'takes_8_data_bytes', Blob(struct.pack('<Q', n + 8), raw[8:])
    yield 'format', 'json', 'closing_brace_removed', pack(text[:-1], data)
    yield 'format', 'json', 'invalid_utf8_in_a_name', pack(text.replace('"' + first[0] + '"', '"' + first[0] + '\udcff"', 1)
                                                          .encode('utf-8', 'surrogateescape'), data)
    yield 'format', 'json', 'a_list', pack('[' + text + ']', data)
    yield 'format', 'json', 'a_string', pack(json.dumps(text), data)
    yield 'format', 'json', 'trailing_garbage', pack(text + ' x', data)
    yield 'format', 'json', 'nul_inside', pack(text[:-1] + '\0}', data)

    def damaged(edit, label, category='types'):
        h = json.loads(text)
        edit(h)
        return 'format', category, label, pack(json.dumps(h), data)

    name = first[0]
    yield damaged(lambda h: h[name].update(dtype=11), 'dtype_a_number')
    yield damaged(lambda h: h[name].update(shape=','.join(map(str, h[name]['shape']))), 'shape_a_string')
    yield damaged(lambda h: h[name].update(shape=None), 'shape_null')
    yield damaged(lambda h: h[name].update(shape=[s + 0.5 for s in h[name]['shape']] or [0.5]), 'shape_fractional')
    yield damaged(lambda h: h[name].update(shape=[-s for s in h[name]['shape']] + [-1]), 'shape_negative')
    yield damaged(lambda h: h[name].update(shape=[2**64] + h[name]['shape']), 'shape_2e64')
    yield damaged(lambda h: h[name].update(shape=[2**62, 2**3] + h[name]['shape']), 'shape_product_overflows')
    yield damaged(lambda h: h[name].update(shape=[0] + h[name]['shape']), 'shape_zero_with_bytes')
    yield damaged(lambda h: h[name].update(data_offsets=[str(x) for x in h[name]['data_offsets']]), 'offsets_strings')
    yield damaged(lambda h: h[name].update(data_offsets=h[name]['data_offsets'] + [0]), 'offsets_three')
    yield damaged(lambda h: h[name].update(data_offsets=h[name]['data_offsets'][:1]), 'offsets_one')
    yield damaged(lambda h: h.update({name: [h[name]['dtype'], h[name]['shape'], h[name]['data_offsets']]}), 'entry_a_list')
    for key in ('dtype', 'shape', 'data_offsets'):
        yield damaged(lambda h, key=key: h[name].pop(key), 'entry_without_' + key)
    yield damaged(lambda h: h.update(__metadata__={'model': 7}), 'metadata_value_a_number')
    yield damaged(lambda h: h.update(__metadata__=['model', 'pointer']), 'metadata_a_list')

    def offsets(edit, label):
        return damaged(edit, label, 'offsets')

    last = ck.tensors[-1][0]
    yield offsets(lambda h: h[name].update(data_offsets=[-4, h[name]['data_offsets'][1]]), 'negative_begin')
    yield offsets(lambda h: h[name].update(data_offsets=h[name]['data_offsets'][::-1]), 'begin_after_end')
    yield offsets(lambda h: h[last].update(data_offsets=[o + 4 for o in h[last]['data_offsets']]), 'last_past_the_file')
    yield offsets(lambda h: h[last].update(data_offsets=[o + 2**40 for o in h[last]['data_offsets']]), 'last_2e40_past_the_file')
    size = len(first[3])
    yield offsets(lambda h: h[name].update(data_offsets=[2**64 - 4, 2**64 - 4 + size]), 'wrap_around_2e64')
    if len(ck.tensors) > 1:
        second = ck.tensors[1][0]
        # the second tensor moved onto the first: they overlap, and its own bytes are indexed by none
        yield offsets(lambda h: h[second].update(data_offsets=[h[name]['data_offsets'][0],
                                                               h[name]['data_offsets'][0] + len(ck.tensors[1][3])]), 'overlapping')
        # every tensor after the first 4 bytes later: a hole, and the last past the file
        def shifted(h):
            for k, v in h.items():
                if k != '__metadata__' and k != name:
                    v['data_offsets'] = [o + 4 for o in v['data_offsets']]
        yield offsets(shifted, 'hole_after_the_first')
    # a hole the data fills: offsets laid out 4 bytes apart, 4 more bytes at the end
    spread = [[sum(len(t[3]) + 4 for t in ck.tensors[:i]), sum(len(t[3]) + 4 for t in ck.tensors[:i]) + len(ck.tensors[i][3])]
              for i in range(len(ck.tensors))]
    yield 'format', 'offsets', 'holes_between_all', pack(json.dumps(header_json(ck.metadata, ck.tensors, spread)),
                                                        b''.join(t[3] + b'\0' * 4 for t in ck.tensors))
    for bad in ('F31', 'f32', 'Q4_0', ''):
        yield damaged(lambda h, bad=bad: h[name].update(dtype=bad), 'unknown_' + (bad or 'empty'), 'dtype_unknown')
    # a key twice (the JSON text holds both; a parser keeping the last would see one tensor)
    entry = json.dumps({name: json.loads(text)[name]})[1:-1]
    yield 'format', 'duplicate_key', 'same_entry_twice', pack('{' + entry + ', ' + text[1:], data)
    if len(ck.tensors) > 1:
        other = json.loads(text)[ck.tensors[1][0]]
        yield 'format', 'duplicate_key', 'second_points_elsewhere', pack(
            '{' + json.dumps({name: other})[1:-1] + ', ' + text[1:], data)
    if ck.metadata is not None:
        yield 'format', 'duplicate_key', 'metadata_twice', pack('{"__metadata__": {}, ' + text[1:], data)

    # ---- model: a loader of this model refuses these ------------------------------------
    params = ck.params()
    if not params:
        return
    picks = []
    for t in [params[0], params[-1], params[rng.randrange(len(params))]]:
        if t not in picks:
            picks.append(t)
    for t in picks:
        yield 'model', 'missing', safe(t[0]), build(ck.metadata, [u for u in ck.tensors if u is not t])
    yield 'model', 'extra', 'blocks.99.extra', build(ck.metadata, ck.tensors + [['blocks.99.extra', 'F32', [4], b'\0' * 16]])
    yield 'model', 'extra', 'head_weightx', build(ck.metadata, ck.tensors + [[params[-1][0] + 'x', params[-1][1], params[-1][2], params[-1][3]]])
    changes = {'F32': [('I32', 1), ('U32', 1), ('F16', 2)], 'I8': [('U8', 1), ('BOOL', 1)], 'I32': [('F32', 1), ('U32', 1), ('I16', 2)],
               'I16': [('U16', 1), ('F16', 1)], 'U8': [('I8', 1)]}
    for dtype, targets in changes.items():
        of = [t for t in params if t[1] == dtype]
        if not of:
            continue
        t = of[rng.randrange(len(of))]
        for to, factor in targets:
            # the same bytes: the last dimension scaled by the size ratio
            shape = (t[2][:-1] + [t[2][-1] * factor]) if t[2] else [factor]
            yield 'model', 'dtype', '%s_to_%s.%s' % (dtype, to, safe(t[0])), with_tensor(ck, t[0], dtype=to, shape=shape)
    for t in picks:
        s = t[2]
        count = math.prod(s)
        if len(s) >= 2 and s[0] != s[-1]:
            yield 'model', 'shape', 'transposed.' + safe(t[0]), with_tensor(ck, t[0], shape=s[::-1])
        if len(s) >= 2:
            yield 'model', 'shape', 'flattened.' + safe(t[0]), with_tensor(ck, t[0], shape=[count])
        yield 'model', 'shape', 'extra_dim.' + safe(t[0]), with_tensor(ck, t[0], shape=s + [1])
        if s and s[0] > 1:
            keep = len(t[3]) // s[0] * (s[0] - 1)
            yield 'model', 'shape', 'one_row_less.' + safe(t[0]), with_tensor(ck, t[0], shape=[s[0] - 1] + s[1:], data=t[3][:keep])
        if count == 1:
            yield 'model', 'shape', 'doubled.' + safe(t[0]), with_tensor(ck, t[0], shape=[2], data=t[3] * 2)
    floats = [t for t in params if t[1] == 'F32']
    if floats:
        fpicks = []
        for t in [floats[0], floats[-1], floats[rng.randrange(len(floats))], floats[rng.randrange(len(floats))]]:
            if t not in fpicks:
                fpicks.append(t)
        bits = {'nan': 0x7fc00000, 'nan_payload': 0x7f800001, 'negative_nan': 0xffc00000, 'inf': 0x7f800000, 'minus_inf': 0xff800000}
        for i, t in enumerate(fpicks):
            for label, pattern in bits.items():
                if i > 0 and label in ('nan_payload', 'negative_nan'):
                    continue
                # one entry, drawn, set to the pattern
                b = bytearray(t[3])
                at = rng.randrange(len(b) // 4) * 4
                b[at:at + 4] = struct.pack('<I', pattern)
                yield 'model', 'nonfinite', '%s_at_%d.%s' % (label, at // 4, safe(t[0])), with_tensor(ck, t[0], data=bytes(b))

    # ---- int8: a quantized model's ranges ------------------------------------------------
    def of(predicate):
        chosen = [t for t in params if predicate(t)]
        if len(chosen) > 2:
            chosen = [chosen[0], chosen[1 + rng.randrange(len(chosen) - 1)]]
        return chosen

    cases = [
        (of(lambda t: t[0].endswith('.bias') and t[1] == 'I32'), '<i', [('bias_INT32_MAX', INT32_MAX), ('bias_INT32_MIN', INT32_MIN)]),
        (of(lambda t: t[0].endswith('.weight') and t[1] == 'I8'), '<b', [('weight_minus_128', -128)]),
        (of(lambda t: t[0].endswith('.requant.multiplier') and t[1] == 'I32'), '<i',
         [('multiplier_1', 1), ('multiplier_minus_5', -5), ('multiplier_2e30_minus_1', 2**30 - 1)]),
        (of(lambda t: t[0].endswith('.requant.shift') and t[1] == 'I32'), '<i', [('shift_40', 40), ('shift_minus_40', -40)]),
        (of(lambda t: t[0].endswith('scale') and t[1] == 'F32'), '<f',
         [('scale_0', 0.0), ('scale_minus_1', -1.0), ('scale_1e30', 1e30), ('scale_1e-41_denormal', 1e-41)]),
    ]
    for tensors, fmt, values in cases:
        for t in tensors:
            for label, value in values:
                yield 'int8', label.split('_')[0], '%s.%s' % (label, safe(t[0])), with_tensor(ck, t[0], data=set_elements(t, fmt, [value]))
    # inside the bounds, but not what the scales give: one entry each (the first), so that the
    # variant differs from the file unless the entry already held the value
    within = [
        (of(lambda t: t[0].endswith('.multiplier') and t[1] == 'I32'), [('0', lambda v: 0), ('INT32_MAX', lambda v: INT32_MAX),
                                                                         ('one_step', lambda v: v - 1 if v == INT32_MAX else v + 1)]),
        (of(lambda t: t[0].endswith('.shift') and t[1] == 'I32'), [('minus_31', lambda v: -31), ('one_step', lambda v: v - 1 if v == 30 else v + 1)]),
    ]
    for tensors, values in within:
        for t in tensors:
            was = struct.unpack('<i', t[3][:4])[0]
            kind = t[0].rsplit('.', 1)[1]
            for label, value in values:
                if value(was) == was:
                    continue
                data = struct.pack('<i', value(was)) + t[3][4:]
                yield 'int8', 'requant', '%s_%s.%s' % (kind, label, safe(t[0])), with_tensor(ck, t[0], data=data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('checkpoint')
    ap.add_argument('outdir')
    ap.add_argument('--seed', type=int, default=41)
    ap.add_argument('--per-category', type=int, default=0, help='at most this many variants of each category (0: all)')
    ap.add_argument('--levels', default='format,model,int8', help='comma-separated levels to write')
    a = ap.parse_args()
    ck = Checkpoint(open(a.checkpoint, 'rb').read())
    rng = random.Random(a.seed)
    levels = set(a.levels.split(','))
    found = [v for v in variants(ck, rng) if v[0] in levels]
    if a.per_category:
        by = {}
        for v in found:
            by.setdefault((v[0], v[1]), []).append(v)
        pick = random.Random(a.seed + 1)
        found = [v for group in by.values() for v in (group if len(group) <= a.per_category else pick.sample(group, a.per_category))]
    os.makedirs(a.outdir, exist_ok=True)
    names = set()
    for level, category, label, raw in found:
        name = '%s.%s.%s.safetensors' % (level, category, label)
        assert name not in names, name
        names.add(name)
        raw = raw.bytes() if isinstance(raw, Blob) else bytes(raw)
        assert raw != ck.raw, name
        with open(os.path.join(a.outdir, name), 'wb') as f:
            f.write(raw)
    print('%s: %d variants in %s' % (a.checkpoint, len(found), a.outdir))


if __name__ == '__main__':
    sys.exit(main())
