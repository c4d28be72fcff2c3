#!/usr/bin/python3
"""stformer against PyTorch, the same cases side by side in one run, one table of medians.

usage: STFORMER_BUILD=build-bench /usr/bin/python3 bench/compare_torch.py [--rounds 3] [--repetitions 2]
                                                  [--only SUBSTRING] [--torch-isa best|avx2]
       (bench/run.sh installs what is missing, builds build-bench with -Dsimd=native and runs this)

Runs `$STFORMER_BUILD/bench/bench_stformer` (Google Benchmark, --repetitions of each case) and
the same cases in PyTorch (Debian's python3-torch) in a child process, same shapes and thread
count, the two sides taking turns for --rounds rounds (stformer first in the odd rounds, PyTorch
in the even ones), so that a machine whose speed drifts over minutes (a shared virtual machine)
slows both alike. Prints: case, stformer's median, PyTorch's median (over every round's
repetitions), PyTorch / stformer as the median of the rounds' ratios, and stformer's GFLOP/s as
a fraction of the FMA peak measured by the same binary (per thread used); then, for the model
inference cases, stformer's forward-only pass (InferOf) against training's forward (ActsOf) on
the same model and input, from the same runs: Acts time / Infer time.

PyTorch runs at its best: OPENBLAS_CORETYPE is unset (this machine's environment sets it and
halves OpenBLAS's GEMM speed), one process per thread count with OMP_NUM_THREADS set and
OpenBLAS on one thread (its own threads fight PyTorch's), glibc keeps freed memory for reuse
(GLIBC_TUNABLES=glibc.malloc.mmap_max=0:...; fresh pages are slow here), gradients are kept
between steps as PyTorch's optimisers do, and a warning is printed when Debian's python3-torch
is not running on OpenBLAS (apt-get install libopenblas0-pthread; the reference BLAS is ~4x
slower). PyTorch cases are the same models as python/stformer_torch.py (SPEC's maths);
MultiHeadAttention is PyTorch's own nn.MultiheadAttention, the Linear cases its F.linear
(one GEMM); inference cases run under torch.inference_mode() on models in eval mode.
Exits non-zero when a case cannot run on either side.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name, stformer benchmark, threads, PyTorch case (kind, args)
FORWARD_SHAPES = [(1, 16, 64, 4), (1, 64, 64, 4), (1, 128, 128, 8), (1, 256, 128, 8)]  # batch, N, D, H


def forward_case(label, bench, kind, b, n, d, h):
    return (f"{label} b{b} N{n} D{d} H{h}", f"{bench}<{b}, {n}, {d}, {h}>", 1, (kind, b, n, d, h))


# The encoder's own products at N = 256 (D = 128, F = 512) by themselves: x·Wᵀ + b, x [M, K],
# W [N, K], against PyTorch's F.linear (OpenBLAS's GEMM): what this machine's caches let a
# product reach, beside what the blocks reach with it.
LINEAR_SHAPES = [(256, 128, 128), (256, 512, 128), (256, 128, 512)]  # M, N, K

CASES = [forward_case("MHA fwd", "BM_MultiHeadAttention", "mha", *s) for s in FORWARD_SHAPES] + [
    forward_case("MHA inference (Infer)", "BM_MultiHeadAttentionInfer", "mha", *s) for s in FORWARD_SHAPES] + [
    forward_case("Encoder fwd", "BM_EncoderBlock", "encoder", *s) for s in FORWARD_SHAPES + [(32, 64, 64, 4)]] + [
    # PyTorch's own nn.TransformerEncoderLayer (post-norm LayerNorm, ReLU, F = 4·D, its fast path
    # in eval mode) against the same layer in stformer, forward only
    (f"nn.TransformerEncoderLayer inference b{b} N{n} D{d} H{h}", f"BM_EncoderBlockInfer<{b}, {n}, {d}, {h}, PostNorm<>>", 1,
     ("torch_encoder_layer", b, n, d, h)) for b, n, d, h in FORWARD_SHAPES] + [
    (f"Linear x·Wᵀ + b, {m} × {n} × {k}", f"BM_Matmul<{m}, {n}, {k}>", 1, ("linear", m, n, k)) for m, n, k in LINEAR_SHAPES] + [
    ("max-value step, pointer, 1 thread", "BM_MaxValueStep<max_value::PointerNet>/threads:1/lanes:2/real_time", 1, ("pointer_step",)),
    ("max-value step, pointer, 2 threads", "BM_MaxValueStep<max_value::PointerNet>/threads:2/lanes:2/real_time", 2, ("pointer_step",)),
    ("max-value step, set, 1 thread", "BM_MaxValueStep<max_value::SetNet>/threads:1/lanes:2/real_time", 1, ("set_step",)),
    ("max-value step, set, 2 threads", "BM_MaxValueStep<max_value::SetNet>/threads:2/lanes:2/real_time", 2, ("set_step",)),
    ("LM train step b32, 1 thread", "BM_LmStep/threads:1/real_time", 1, ("lm_step",)),
    ("LM train step b32, 2 threads", "BM_LmStep/threads:2/real_time", 2, ("lm_step",)),
    ("pointer inference, one set (Infer)", "BM_PointerForward<InferOf>", 1, ("pointer_infer",)),
    ("set inference, one set (Infer)", "BM_SetForward<InferOf>", 1, ("set_infer",)),
    ("LM inference, one window (Infer)", "BM_LmForward<InferOf, 1>", 1, ("lm_infer", 1)),
    ("LM inference b32 (Infer)", "BM_LmForward<InferOf, 32>", 1, ("lm_infer", 32)),
    # int8 in stformer against PyTorch's float32 model (the same PyTorch case)
    ("pointer inference, one set, int8 (Quantized<PointerModel>)", "BM_QPointerForward", 1, ("pointer_infer",)),
    ("LM inference, one window, int8 embedding and head", "BM_LmForwardW8<1>", 1, ("lm_infer", 1)),
    ("LM inference b32, int8 embedding and head", "BM_LmForwardW8<32>", 1, ("lm_infer", 32)),
]
PEAK = "BM_FmaPeak"

# The forward-only pass against training's forward (ActsOf) on the same model and input, both
# stformer, same run: case of CASES, its Acts benchmark.
ACTS = {
    "pointer inference, one set (Infer)": "BM_PointerForward<ActsOf>",
    "set inference, one set (Infer)": "BM_SetForward<ActsOf>",
    "LM inference, one window (Infer)": "BM_LmForward<ActsOf, 1>",
    "LM inference b32 (Infer)": "BM_LmForward<ActsOf, 32>",
}


def run_stformer(build, repetitions, cases):
    exe = os.path.join(build, "bench", "bench_stformer")
    if not os.access(exe, os.X_OK):
        sys.exit(f"compare_torch: {exe} not found (build it: meson setup {build} -Dsimd=native && ninja -C {build})")
    names = [PEAK] + [c[1] for c in cases] + [ACTS[c[0]] for c in cases if c[0] in ACTS]
    pattern = "|".join("^" + n.replace("<", ".").replace(">", ".").replace("/", ".").replace(" ", ".") for n in names)
    cmd = [exe, f"--benchmark_filter={pattern}", "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
           "--benchmark_min_time=0.3"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    results = {}  # name: ([seconds of each repetition], [GFLOP/s of each])
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        t, g = results.setdefault(b["run_name"], ([], []))
        t.append(b["real_time"] * scale[b["time_unit"]])
        g.append(b.get("GFLOP"))
    return results


# --- the PyTorch side (runs in a child process with its own environment) --------------------

def torch_case(kind, *args):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import stformer_torch as st
    torch.manual_seed(0)

    def inference(m, *inputs, **options):  # one forward pass of m in eval and inference mode
        m.eval()

        def fn():
            with torch.inference_mode():
                m(*inputs, **options)
        return fn

    if kind == "mha":
        b, n, d, h = args
        m = torch.nn.MultiheadAttention(d, h, batch_first=True)
        x = torch.randn(b, n, d)
        return inference(m, x, x, x, need_weights=False)
    if kind == "linear":
        m, n, k = args
        x, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        return lambda: torch.nn.functional.linear(x, w, bias)  # no tensor requires a gradient
    if kind == "encoder":
        b, n, d, h = args
        return inference(st.EncoderBlock(d, h, 4 * d), torch.randn(b, n, d))
    if kind == "torch_encoder_layer":
        b, n, d, h = args
        return inference(torch.nn.TransformerEncoderLayer(d, h, 4 * d, dropout=0.0, batch_first=True), torch.randn(b, n, d))
    if kind in ("pointer_infer", "set_infer"):
        x = torch.randn(1, 50, 2) + torch.randn(1, 1, 2)
        return inference(st.PointerModel(2, 16, 1, 64, 2) if kind == "pointer_infer" else st.SetTransformer(2, 64, 4, 16, 2), x)
    if kind in ("pointer_step", "set_step"):
        x = torch.randn(500, 50, 2) + torch.randn(500, 1, 2)
        target = x.norm(dim=-1).argmax(-1)
        point = x[torch.arange(500), target]
        if kind == "pointer_step":
            m = st.PointerModel(2, 16, 1, 64, 2)
            opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)

            def loss():
                return torch.nn.functional.nll_loss(m(x)[:, 0, :], target)
        else:
            m = st.SetTransformer(2, 64, 4, 16, 2)
            opt = torch.optim.Adam(m.parameters(), lr=1e-4)

            def loss():
                return (m(x)[:, 0, :] - point).norm(dim=-1).mean()

        def fn():
            opt.zero_grad(set_to_none=False)
            loss().backward()
            opt.step()
        return fn
    if kind in ("lm_step", "lm_infer"):
        v, length = 33278, 32
        m = st.LanguageModel(v, length, 128, 4, 512, 2)
        if kind == "lm_infer":
            (batch,) = args
            return inference(m, torch.randint(0, v, (batch, length)))
        ids = torch.randint(0, v, (32, length))
        nxt = torch.randint(0, v, (32,))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)

        def fn():
            opt.zero_grad(set_to_none=False)
            torch.nn.functional.cross_entropy(m(ids)[:, 0, :], nxt).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
        return fn
    raise ValueError(kind)


def seconds_each(fn, repetitions, min_time=0.3):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repetitions):
        n, elapsed = 0, 0.0
        start = time.perf_counter()
        while elapsed < min_time:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
        times.append(elapsed / n)
    return times


def torch_worker(repetitions, selected):
    import torch
    results = {"blas": "", "torch": torch.__version__}
    torch.set_flush_denormal(True)  # as stformer's ThreadPool: subnormals to zero (PyTorch at its best)
    torch.ones(64, 64) @ torch.ones(64, 64)
    with open("/proc/self/maps") as f:
        maps = f.read()
    results["blas"] = "openblas" if "openblas" in maps else ("blis" if "blis" in maps else "reference")
    for name, _, threads, case in CASES:
        if name not in selected:
            continue
        torch.set_num_threads(threads)
        results[name] = seconds_each(torch_case(*case), repetitions)
    print(json.dumps(results))


def run_torch(repetitions, selected, isa="best"):
    """One worker process per thread count (OMP_NUM_THREADS = threads, OpenBLAS itself on one
    thread: the fastest of the settings tried here; OpenBLAS's own threads fighting PyTorch's
    made 2-thread steps 2x slower than 1-thread ones). isa "avx2": OpenBLAS's Haswell kernels
    and ATen's AVX2 ones, PyTorch as it runs on a CPU without AVX-512 (beside an x86-64-v3
    build of stformer)."""
    results = {}
    for threads in sorted({c[2] for c in CASES if c[0] in selected}):
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        if isa == "avx2":
            env["OPENBLAS_CORETYPE"] = "Haswell"
            env["ATEN_CPU_CAPABILITY"] = "avx2"
        env["GLIBC_TUNABLES"] = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.top_pad=1073741824"
        env["OMP_NUM_THREADS"] = str(threads)
        env["OPENBLAS_NUM_THREADS"] = "1"
        cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker", "--repetitions", str(repetitions)]
        for name, _, t, _ in CASES:
            if name in selected and t == threads:
                cmd += ["--case", name]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        results.update(json.loads(out.strip().splitlines()[-1]))
    return results


def fmt(seconds):
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="turns of each side, alternating")
    p.add_argument("--repetitions", type=int, default=2, help="repetitions of each case in a round")
    p.add_argument("--only", default="", help="run the cases whose name contains this")
    p.add_argument("--torch-isa", choices=["best", "avx2"], default="best",
                   help="PyTorch's instruction set: its best on this CPU, or AVX2 only (to compare with an x86-64-v3 build)")
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--case", action="append", default=[], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.torch_worker:
        torch_worker(a.repetitions, set(a.case))
        return 0
    if a.rounds < 1 or a.repetitions < 1:
        sys.exit("compare_torch: --rounds and --repetitions must be at least 1")
    cases = [c for c in CASES if a.only in c[0]]
    if not cases:
        sys.exit(f"compare_torch: no case matches '{a.only}'")
    build = os.environ.get("STFORMER_BUILD", "build")
    our_rounds, their_rounds = [], []
    for r in range(a.rounds):
        sides = [("stformer", lambda: our_rounds.append(run_stformer(build, a.repetitions, cases))),
                 ("PyTorch", lambda: their_rounds.append(run_torch(a.repetitions, [c[0] for c in cases], a.torch_isa)))]
        for side, run in sides if r % 2 == 0 else sides[::-1]:
            print(f"compare_torch: round {r + 1} of {a.rounds}: {side}", file=sys.stderr, flush=True)
            run()
    med = statistics.median
    ours = {}  # name: (median seconds, median GFLOP/s) over every round's repetitions
    for n in set.intersection(*(set(o) for o in our_rounds)):
        g = [x for o in our_rounds for x in o[n][1] if x is not None]
        ours[n] = (med([x for o in our_rounds for x in o[n][0]]), med(g) if g else None)
    info = their_rounds[0]  # and the cases' lists of seconds
    theirs = {n: med([x for t in their_rounds for x in t[n]])
              for n in set.intersection(*(set(t) for t in their_rounds)) if n not in ("blas", "torch")}
    if PEAK not in ours:
        sys.exit("compare_torch: the FMA peak benchmark did not run")
    peak = ours[PEAK][1]
    if info["blas"] != "openblas":
        print(f"warning: PyTorch runs on the {info['blas']} BLAS, not OpenBLAS: apt-get install libopenblas0-pthread", file=sys.stderr)
    print(f"stformer build: {build}; FMA peak {peak:.1f} GFLOP/s per thread; PyTorch {info['torch']} on {info['blas']}"
          f"{' (AVX2 only)' if a.torch_isa == 'avx2' else ''}; medians of {a.rounds} rounds of {a.repetitions}, "
          f"the two sides taking turns; the ratio the median of the rounds' ratios")
    print()
    print("| case | stformer | PyTorch | PyTorch / stformer | stformer GFLOP/s | of FMA peak |")
    print("|---|---|---|---|---|---|")
    missing = []
    for name, bench, threads, _ in cases:
        if bench not in ours or name not in theirs:
            missing.append(name)
            continue
        t, gflops = ours[bench]
        tt = theirs[name]
        ratio = med([med(th[name]) / med(o[bench][0]) for o, th in zip(our_rounds, their_rounds)])
        g = f"{gflops:.1f}" if gflops else "–"
        frac = f"{100 * gflops / (peak * threads):.0f}%" if gflops else "–"
        print(f"| {name} | {fmt(t)} | {fmt(tt)} | {ratio:.2f}× | {g} | {frac} |")
    pairs = [(name, ours[bench][0], ours[ACTS[name]][0]) for name, bench, _, _ in cases
             if name in ACTS and bench in ours and ACTS[name] in ours]
    missing += [ACTS[name] for name, _, _, _ in cases if name in ACTS and ACTS[name] not in ours]
    if pairs:
        print()
        print("Infer vs Acts forward (stformer, same run)")
        print()
        print("| case | Infer | Acts | Acts / Infer |")
        print("|---|---|---|---|")
        for name, t_infer, t_acts in pairs:
            print(f"| {name.replace(' (Infer)', '')} | {fmt(t_infer)} | {fmt(t_acts)} | {t_acts / t_infer:.2f}× |")
    if missing:
        print("compare_torch: cases that did not run: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
