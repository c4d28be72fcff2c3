#!/usr/bin/python3
"""SPEC Example 2 in PyTorch, for the side-by-side run with `wikitext_lm train --minutes M`.

usage: /usr/bin/python3 bench/lm_torch.py --data ../shared/data/wikitext-2 --minutes 30 --threads 2 \
           --curve torch_curve.csv [--eval-every 1000] [--eval-positions 20000] [--seed 0]

The same model (python/stformer_torch.py's LanguageModel: V = 33,278, L = 32, D = 128,
H = 4, F = 512, 2 blocks, PMA, batch 32), vocabulary (ids by first appearance over train,
valid, test; <eos> per line), samples (every training position, shuffled per pass), AdamW
(lr 1e-3, betas (0.9, 0.999), weight decay 0.01), schedule (linear warm-up over 500 steps,
then cosine to 0; with a time budget the schedule's length is estimated at the end of
warm-up from the speed so far, as wikitext_lm does) and clipping (global norm 1.0). The
learning curve goes to --curve in wikitext_lm's columns (step, minutes, train_loss,
valid_ppl; validation time not counted), so `wikitext_lm plot --curve ours.csv --compare
torch_curve.csv` draws both. At the end: test perplexity over every position t >= L, and
the time it took.

Run PyTorch at its best (see bench/compare_torch.py):
  env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2 \
    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.top_pad=1073741824 \
    /usr/bin/python3 bench/lm_torch.py ...
"""
import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import stformer_torch as st  # noqa: E402

L, B = 32, 32


def read_corpus(folder):
    vocab, splits = {"<eos>": 0}, {}
    for split in ("train", "valid", "test"):
        ids = []
        with open(os.path.join(folder, split + ".txt"), encoding="utf-8") as f:
            for line in f:
                for w in line.split() + ["<eos>"]:
                    ids.append(vocab.setdefault(w, len(vocab)))
        splits[split] = torch.tensor(ids, dtype=torch.long)
    return vocab, splits


def windows(ids, positions):
    offsets = torch.arange(-L, 0)
    return ids[positions[:, None] + offsets], ids[positions]


def mean_nll(model, ids, first, last, batch=256):
    model.eval()
    total = 0.0
    with torch.inference_mode():
        for t0 in range(first, last, batch):
            pos = torch.arange(t0, min(t0 + batch, last))
            x, y = windows(ids, pos)
            total += torch.nn.functional.cross_entropy(model(x)[:, 0, :], y, reduction="sum").item()
    model.train()
    return total / (last - first)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--minutes", type=float, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--curve", required=True)
    p.add_argument("--eval-every", type=int, default=1000)
    p.add_argument("--eval-positions", type=int, default=20000)
    p.add_argument("--test-positions", type=int, default=0, help="0: every position of test.txt")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)  # as stformer's ThreadPool: subnormals to zero (PyTorch at its best)
    torch.manual_seed(a.seed)
    vocab, s = read_corpus(a.data)
    train, valid, test = s["train"], s["valid"], s["test"]
    print(f"corpus: {len(vocab)} words, {len(train)} / {len(valid)} / {len(test)} tokens, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    model = st.LanguageModel(len(vocab), L, 128, 4, 512, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), weight_decay=0.01)
    warmup, total = 500, 1 << 40

    def lr_at(step):
        if step < warmup:
            return a.lr * step / warmup
        return a.lr * (1 + math.cos(math.pi * (min(step, total) - warmup) / max(total - warmup, 1))) / 2

    curve = open(a.curve, "w")
    curve.write("step,minutes,train_loss,valid_ppl\n")
    order, cursor = torch.randperm(len(train) - L) + L, 0
    step, paused, loss_sum, loss_count = 0, 0.0, 0.0, 0
    start = time.perf_counter()

    def minutes():
        return (time.perf_counter() - start - paused) / 60

    while step < total and minutes() < a.minutes:
        if cursor + B > len(order):
            order, cursor = torch.randperm(len(train) - L) + L, 0
        x, y = windows(train, order[cursor:cursor + B])
        cursor += B
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = torch.nn.functional.cross_entropy(model(x)[:, 0, :], y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_sum += loss.item()
        loss_count += 1
        if step == warmup:
            per_minute = step / minutes()
            total = step + max(1, int(per_minute * (a.minutes - minutes())))
            print(f"warm-up done: {per_minute:.0f} steps per minute, schedule of {total} steps", flush=True)
        last = step >= total or minutes() >= a.minutes
        validate = a.eval_every > 0 and (step % a.eval_every == 0 or last)
        if step % 100 == 0 or last:
            m = minutes()
            print(f"step {step:7d}  loss {loss_sum / loss_count:.4f}  {step * B / (m * 60):6.0f} tokens/s  lr {lr_at(step):.2e}", flush=True)
            if not validate:
                curve.write(f"{step},{m},{loss_sum / loss_count},\n")
                loss_sum, loss_count = 0.0, 0
        if validate:
            m = minutes()
            t = time.perf_counter()
            ppl = math.exp(mean_nll(model, valid, L, L + a.eval_positions))
            paused += time.perf_counter() - t
            print(f"step {step:7d}  validation perplexity {ppl:.2f}", flush=True)
            curve.write(f"{step},{m},{loss_sum / loss_count if loss_count else float('nan')},{ppl}\n")
            curve.flush()
            loss_sum, loss_count = 0.0, 0
    print(f"{step} steps in {minutes():.1f} minutes of training (validation not counted)", flush=True)
    t = time.perf_counter()
    last = len(test) if a.test_positions <= 0 else min(len(test), L + a.test_positions)
    nll = mean_nll(model, test, L, last)
    print(f"test perplexity {math.exp(nll):.2f} over {last - L} positions ({time.perf_counter() - t:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
