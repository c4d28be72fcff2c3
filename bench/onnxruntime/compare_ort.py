#!/usr/bin/python3
"""stformer against ONNX Runtime, forward-only cases side by side in one run, one table of medians.

usage: /usr/bin/python3 bench/onnxruntime/compare_ort.py --stformer-build BUILD --ort-bench ORT_BENCH --out OUT_DIR
                                                   [--rounds 3] [--repetitions 2] [--only SUBSTRING] [--tolerance 1e-4]
       (bench/onnxruntime/run.sh installs ONNX Runtime, builds ORT_BENCH and BUILD, and runs this)

The cases are compare_torch.py's forward-only ones, under its names, with its PyTorch models,
weights and inputs (compare_torch.torch_case, seeded): MHA inference (nn.MultiheadAttention),
the encoder block (python/stformer_torch.py), PyTorch's nn.TransformerEncoderLayer, the pointer
and set models over one set, the language model over one window and over 32. Each PyTorch model
is exported with torch.onnx.export (opset 17, static shapes) to OUT_DIR/models/, with its input
and PyTorch's output on it; ORT_BENCH (ort_bench.cpp) runs the exported models through ONNX
Runtime's C API (every graph optimisation, sequential execution, inter-op threads 1, its
intra-op pool as it comes, spinning, subnormals flushed to zero), and this script prints the
table and exits with status 1 when ORT's output differs from PyTorch's by more than --tolerance
times PyTorch's largest output value.

stformer's side is `BUILD/bench/bench_stformer`: the forward-only benchmark compare_torch.py
names for the case, or, for the encoder rows, EncoderBlock's forward-only pass
(BM_EncoderBlockInfer) where the binary has one for the shape (at batch 32 it has only the
training forward, BM_EncoderBlock). ONNX Runtime runs on one thread for every row, and on two
(intra_op_num_threads = 2) for the rows of TWO_THREADS, where stformer's forward-only pass runs
on a ThreadPool of 2 threads. The sides take turns as in compare_torch.py: --rounds rounds of
--repetitions runs of every case, stformer first in the odd rounds and ONNX Runtime in the even
ones; each side's time is the median over all its runs, the ratio the median of the rounds'
ratios.
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import compare_torch as ct  # noqa: E402  (bench/compare_torch.py: the cases, the PyTorch models, stformer's runner)

# compare_torch.py's forward-only float cases (its int8 rows and training rows are not here)
FORWARD_ONLY = ("MHA inference (Infer)", "Encoder fwd", "nn.TransformerEncoderLayer inference", "pointer inference, one set (Infer)",
                "set inference, one set (Infer)", "LM inference, one window (Infer)", "LM inference b32 (Infer)")
# the rows both sides also run on two threads: stformer's forward-only pass on a ThreadPool of 2
# (bench_stformer's *Threads cases, argument 2: the same bits as on one thread)
TWO_THREADS = {"MHA inference (Infer) b1 N256 D128 H8": "BM_MultiHeadAttentionThreads<1, 256, 128, 8>/2",
               "Encoder fwd b1 N256 D128 H8": "BM_EncoderBlockThreads<1, 256, 128, 8>/2",
               "nn.TransformerEncoderLayer inference b1 N256 D128 H8": "BM_EncoderBlockThreads<1, 256, 128, 8, PostNorm<>>/2",
               "LM inference, one window (Infer)": "BM_LmForwardThreads<1>/2"}


def stformer_benchmark(bench, case, available):
    """compare_torch.py's benchmark, or for the encoder rows EncoderBlock's forward-only pass
    when bench_stformer has it for the shape."""
    if case[0] == "encoder":
        _, b, n, d, h = case
        infer = f"BM_EncoderBlockInfer<{b}, {n}, {d}, {h}>"
        if infer in available:
            return infer
    return bench


def list_benchmarks(build):
    exe = os.path.join(build, "bench", "bench_stformer")
    if not os.access(exe, os.X_OK):
        sys.exit(f"compare_ort: {exe} not found (meson setup {build} -Dsimd=native -Dbench=enabled && ninja -C {build} bench/bench_stformer)")
    out = subprocess.run([exe, "--benchmark_list_tests=true"], check=True, capture_output=True, text=True).stdout
    return set(out.split("\n"))


def model_and_inputs(case):
    """The PyTorch model and inputs compare_torch.torch_case times for an inference case (its
    closure's m, inputs and options), in eval mode."""
    fn = ct.torch_case(*case)
    cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    if not {"m", "inputs", "options"} <= set(cells):
        sys.exit(f"compare_ort: compare_torch.torch_case{case} is not an inference case of m(*inputs, **options)")
    return cells["m"], cells["inputs"], cells["options"]


def export(name, case, folder):
    """Exports one case's model to folder/<slug>.onnx with input x and output y (the model's first
    output), and writes the input and PyTorch's output as raw tensors. Returns the manifest line."""
    import torch

    m, inputs, options = model_and_inputs(case)
    x = inputs[0]
    if any(i is not x for i in inputs):
        sys.exit(f"compare_ort: {name}: the model takes different inputs; the ONNX model has one")

    class One(torch.nn.Module):  # x -> the model's first output, its inputs all x (self-attention)
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            y = self.m(*([x] * len(inputs)), **options)
            return y[0] if isinstance(y, tuple) else y

    one = One().eval()
    with torch.inference_mode():
        y = one(x)
    slug = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
    path = os.path.join(folder, slug)
    # the fast paths of nn.MultiheadAttention and nn.TransformerEncoderLayer (fused operators the
    # exporter cannot write) are taken only without gradients: export with them enabled. The
    # exporter's warning about the shape of prim::Constant (from ScaleNorm's clamp) is silenced:
    # the ONNX model's output is checked against PyTorch's instead.
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The shape inference of prim::Constant type is missing")
        torch.onnx.export(one, (x,), path + ".onnx", input_names=["x"], output_names=["y"], opset_version=17,
                          do_constant_folding=True)
    x.numpy().tofile(path + ".in.bin")
    y.numpy().astype("float32").tofile(path + ".out.bin")
    kind = {torch.float32: "f32", torch.int64: "i64"}[x.dtype]
    shape = ",".join(str(s) for s in x.shape)
    return "\t".join([name, path + ".onnx", kind, shape, path + ".in.bin", ",".join(str(s) for s in y.shape), path + ".out.bin"])


def run_ort(ort_bench, manifest, threads, repetitions, names):
    out = subprocess.run([ort_bench, manifest, str(threads), str(repetitions), "0.3", *names], check=True,
                         stdout=subprocess.PIPE, text=True).stdout  # its errors go to stderr as they come
    results = {}  # name: (max abs error, max abs of PyTorch's output, [seconds of each repetition]); "version"
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "VERSION":
            results["version"] = f"{f[1]} (C API version {f[2]})"
        elif f[0] == "RESULT":
            results[f[1]] = (float(f[2]), float(f[3]), [float(s) for s in f[4].split(",")])
    return results


def stformer_source(build):
    """The source tree the build is of, and its commit: git's (and whether include/ has
    uncommitted changes) when it is a checkout, else its COMMIT file's first line."""
    import json
    try:
        with open(os.path.join(build, "meson-info", "meson-info.json")) as f:
            source = json.load(f)["directories"]["source"]
    except (OSError, KeyError, ValueError):
        return "unknown source"
    git = subprocess.run(["git", "-C", source, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if git.returncode == 0:
        dirty = subprocess.run(["git", "-C", source, "status", "--porcelain", "--", "include"], capture_output=True, text=True).stdout
        return f"{source} at {git.stdout.strip()}{' with uncommitted changes in include/' if dirty.strip() else ''}"
    try:
        with open(os.path.join(source, "COMMIT")) as f:
            return f"{source} at {f.readline().strip()} (its COMMIT file)"
    except OSError:
        return f"{source} (not a git checkout)"


def simd(build):
    """The build's -Dsimd option."""
    import json
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            return "-Dsimd=" + next(str(o["value"]) for o in json.load(f) if o["name"] == "simd")
    except (OSError, StopIteration, KeyError, ValueError):
        return "-Dsimd unknown"


def loadavg():
    """The machine's load average (other work shares the cores with both sides)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def cpu_line():
    fields, flags = {}, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = (x.strip() for x in line.partition(":"))
                fields.setdefault(key, value)
                if line.startswith(("flags", "Features")):
                    flags |= {w for w in line.split(":", 1)[1].split() if w == "avx2" or w.startswith("avx512") or w in ("asimd", "sve")}
    except OSError:
        pass
    model = fields.get("model name", platform.machine())
    if "cpu family" in fields:
        model += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return f"{model}; {os.cpu_count()} logical CPUs; {' '.join(sorted(flags)) or 'no AVX2/AVX-512 flags'}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stformer-build", required=True, help="a meson build folder with bench/bench_stformer")
    p.add_argument("--ort-bench", required=True, help="ort_bench, built from ort_bench.cpp")
    p.add_argument("--out", required=True, help="folder for the exported models and their tensors")
    p.add_argument("--rounds", type=int, default=3, help="turns of each side, alternating")
    p.add_argument("--repetitions", type=int, default=2, help="repetitions of each case in a round")
    p.add_argument("--only", default="", help="run the cases whose name contains this")
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest |ORT - PyTorch| allowed, times max |PyTorch|")
    a = p.parse_args()
    if a.rounds < 1 or a.repetitions < 1:
        sys.exit("compare_ort: --rounds and --repetitions must be at least 1")
    if not os.access(a.ort_bench, os.X_OK):
        sys.exit(f"compare_ort: --ort-bench {a.ort_bench}: not an executable")

    available = list_benchmarks(a.stformer_build)
    cases = []  # (row name, stformer benchmark, ORT threads, compare_torch case)
    for name, bench, threads, case in ct.CASES:
        if threads == 1 and name.startswith(FORWARD_ONLY) and a.only in name:
            ours = stformer_benchmark(bench, case, available)
            cases += [(name, ours, 1, case)] + ([(name, TWO_THREADS[name], 2, case)] if name in TWO_THREADS else [])
    if not cases:
        sys.exit(f"compare_ort: no case matches '{a.only}'")
    missing = sorted({c[1] for c in cases} - available)
    if missing:
        sys.exit(f"compare_ort: bench_stformer has no {', '.join(missing)}")

    # the models, their inputs and PyTorch's outputs
    import torch
    folder = os.path.join(a.out, "models")
    os.makedirs(folder, exist_ok=True)
    manifest = os.path.join(folder, "manifest.tsv")
    lines = []
    for name in dict.fromkeys(c[0] for c in cases):
        case = next(c[3] for c in cases if c[0] == name)
        print(f"compare_ort: exporting {name}", file=sys.stderr, flush=True)
        lines.append(export(name, case, folder))
    with open(manifest, "w") as f:
        f.write("\n".join(lines) + "\n")
    torch_version = torch.__version__

    names = {t: [c[0] for c in cases if c[2] == t] for t in (1, 2)}
    stformer_cases = [(b, b, 1, None) for b in dict.fromkeys(c[1] for c in cases)]  # by benchmark name: no Acts runs
    our_rounds, their_rounds = [], []

    def ort_round():
        their_rounds.append({t: run_ort(a.ort_bench, manifest, t, a.repetitions, n) for t, n in names.items() if n})

    load_before = loadavg()
    if load_before != "unknown" and float(load_before.split()[0]) > 0.5:
        print(f"compare_ort: warning: load average {load_before}: other work is running on this machine; both sides "
              "slow down, ONNX Runtime's 2-thread rows most (its pool's second thread waits for a busy core)", file=sys.stderr)
    for r in range(a.rounds):
        sides = [("stformer", lambda: our_rounds.append(ct.run_stformer(a.stformer_build, a.repetitions, stformer_cases))),
                 ("ONNX Runtime", ort_round)]
        for side, run in sides if r % 2 == 0 else sides[::-1]:
            print(f"compare_ort: round {r + 1} of {a.rounds}: {side}", file=sys.stderr, flush=True)
            run()

    # outputs against PyTorch's, from every ORT run
    status = 0
    errors = {}
    for name, _, t, _ in cases:
        runs = [th[t][name] for th in their_rounds]
        err, ref = max(x[0] for x in runs), runs[0][1]
        errors[(name, t)] = (err, ref)
        if not err <= a.tolerance * max(ref, 1e-30):
            print(f"compare_ort: FAILED: {name}, ORT on {t} thread(s): max |ORT - PyTorch| = {err:.3g}, "
                  f"above {a.tolerance:g} × max |PyTorch| = {a.tolerance * ref:.3g}", file=sys.stderr)
            status = 1

    med = statistics.median
    print(f"CPU: {cpu_line()}; load average (1, 5, 15 minutes) {load_before} before the rounds, {loadavg()} after")
    peak = med([x for o in our_rounds for x in o[ct.PEAK][1] if x is not None])
    print(f"stformer: {stformer_source(a.stformer_build)}, build {a.stformer_build} ({simd(a.stformer_build)}), "
          f"FMA peak {peak:.1f} GFLOP/s per thread; ONNX Runtime {their_rounds[0][1]['version']} "
          f"(models exported by PyTorch {torch_version}, opset 17); medians of {a.rounds} rounds of {a.repetitions}, "
          f"the two sides taking turns; the ratio the median of the rounds' ratios; both sides on the threads the row names")
    print()
    print("| row | threads | stformer | ONNX Runtime | ORT / stformer | max abs error ORT vs PyTorch (max abs output) | stformer benchmark |")
    print("|---|---|---|---|---|---|---|")
    ratios = {}
    for name, bench, t, _ in cases:
        ours = med([x for o in our_rounds for x in o[bench][0]])
        theirs = med([x for th in their_rounds for x in th[t][name][2]])
        ratio = med([med(th[t][name][2]) / med(o[bench][0]) for o, th in zip(our_rounds, their_rounds)])
        err, ref = errors[(name, t)]
        print(f"| {name} | {t} | {ct.fmt(ours)} | {ct.fmt(theirs)} | {ratio:.2f}× | {err:.2g} ({ref:.3g}) | `{bench}` |")
        ratios[(name, t)] = ratio
    print()
    below = [f"{n} ({r:.2f}×)" for (n, t), r in ratios.items() if t == 1 and r < 1.3]
    ahead = [f"{n} ({r:.2f}×)" for (n, t), r in ratios.items() if t == 2 and r < 1]
    print(f"1 thread each, rows below 1.3×: {', '.join(below) or 'none'}")
    if any(t == 2 for _, t in ratios):
        print(f"2 threads each, rows where ORT is faster: {', '.join(ahead) or 'none'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
