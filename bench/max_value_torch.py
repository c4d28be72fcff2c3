#!/usr/bin/python3
"""SPEC Example 1 in PyTorch (python/stformer_torch.py's models), for the side-by-side
comparison with `max_value train`: same models, data, optimisers and schedules.

usage: /usr/bin/python3 bench/max_value_torch.py pointer [--seeds 0 1 2 3 4] [--fresh]
       /usr/bin/python3 bench/max_value_torch.py set [--seeds 0] [--iterations 2000]
Prints, per seed, the test metric on 1,000 fresh sets and the milliseconds per iteration.
Runs on one thread (torch.set_num_threads(1)) unless --threads says otherwise.

PyTorch at its best here needs OpenBLAS (Debian's python3-torch otherwise runs on the
reference BLAS, 4x slower: apt-get install libopenblas0-pthread), OPENBLAS_CORETYPE unset,
and glibc keeping freed memory (fresh pages are slow on this machine):
  env -u OPENBLAS_CORETYPE \
    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.top_pad=1073741824 \
    /usr/bin/python3 bench/max_value_torch.py pointer --seeds 0 1 2 3 4
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import stformer_torch as st  # noqa: E402

N = 50


def draw(b):
    x = torch.randn(b, N, 2) + torch.randn(b, 1, 2)
    target = x.norm(dim=-1).argmax(-1)
    return x, target, x[torch.arange(b), target]


def run(kind, seed, iterations, fresh):
    torch.manual_seed(seed)
    if kind == "pointer":
        model = st.PointerModel(2, 16, 1, 64, 2)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, iterations)
    else:
        model = st.SetTransformer(2, 64, 4, 16, 2)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        sched = None
    x, target, point = draw(500)
    start = time.perf_counter()
    for _ in range(iterations):
        if fresh or kind == "set":
            x, target, point = draw(500)
        out = model(x)
        if kind == "pointer":
            loss = torch.nn.functional.nll_loss(out[:, 0, :], target)
        else:
            loss = (out[:, 0, :] - point).norm(dim=-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched:
            sched.step()
    ms = 1000 * (time.perf_counter() - start) / iterations
    with torch.no_grad():
        x, target, point = draw(1000)
        out = model(x)
        if kind == "pointer":
            pred = out[:, 0, :].argmax(-1)
            return ms, f"accuracy {100 * (pred == target).float().mean():.1f}%"
        y = out[:, 0, :]
        dist = (y - point).norm(dim=-1).mean()
        nearest = (x - y[:, None, :]).norm(dim=-1).argmin(-1)
        return ms, f"mean distance {dist:.4f}, nearest-point hits {100 * (nearest == target).float().mean():.1f}%"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["pointer", "set"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--iterations", type=int)
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)  # as stformer's ThreadPool: subnormals to zero (PyTorch at its best)
    iterations = a.iterations or (300 if a.model == "pointer" else 2000)
    for seed in a.seeds:
        ms, metric = run(a.model, seed, iterations, a.fresh)
        print(f"pytorch {torch.__version__} {a.model} seed {seed}: {metric}, {ms:.1f} ms per iteration", flush=True)


if __name__ == "__main__":
    main()
