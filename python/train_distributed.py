#!/usr/bin/python3
"""Trains SPEC's max-value `pointer` model (Example 1) in PyTorch on several processes with
torch.distributed (DistributedDataParallel, gloo backend, CPU), and exports a safetensors
checkpoint that stformer loads unchanged: `max_value eval/predict --checkpoint`,
`stformer-c-api --image` (the model's image) for firmware.

usage: /usr/bin/python3 python/train_distributed.py --output pointer.safetensors
           [--processes 2] [--iterations 300] [--batch 500] [--lr 0.01] [--seed 0]
           [--sets SETS.safetensors --predictions OUT.safetensors]

Each process draws its own sets (seed + rank) and computes the loss on its share of the batch
(--batch / --processes sets); DDP averages the gradients, so every process holds the same
model and the run equals one process on the whole batch up to the order of additions. The
recipe is SPEC's: AdamW (lr 0.01, weight decay 0.01), gradients clipped to norm 1, the loss
the negative log-likelihood of the largest-norm point. Process 0 writes the checkpoint under
SPEC's parameter names (with metadata "model": "pointer"), and with --sets the model's
log-probabilities for the sets x [S, 50, 2] of a `max_value sets` file (log_probs [S, 50], as
`max_value predict` writes them), so that the two can be compared.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stformer_torch as st  # noqa: E402

N = 50


def read_sets(path):
    """x [S, 50, 2] from a safetensors file (max_value sets)."""
    x = st.read_safetensors(path)[0].get("x")
    if x is None or x.dtype != torch.float32 or x.dim() != 3 or list(x.shape[1:]) != [N, 2]:
        got = "no x" if x is None else f"x {x.dtype} {list(x.shape)}"
        raise SystemExit(f"{path}: expected x [S, 50, 2] F32, got {got}")
    return x


def worker(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.processes)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial model in every process
    model = st.PointerModel(2, 16, 1, 64, 2)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed * 1000 + 1 + rank)  # each process its own sets
    share = args.batch // args.processes
    for it in range(args.iterations):
        x = torch.randn(share, N, 2, generator=gen) + torch.randn(share, 1, 2, generator=gen)
        target = x.norm(dim=-1).argmax(-1)
        logp = ddp(x)[:, 0, :]  # [B, 50] log-probabilities
        loss = torch.nn.functional.nll_loss(logp, target)
        opt.zero_grad()
        loss.backward()  # DDP: gradients averaged over the processes
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if rank == 0 and ((it + 1) % max(1, args.iterations // 10) == 0 or it + 1 == args.iterations):
            print(f"iteration {it + 1:5d}  loss {loss.item():.4f} (process 0's share)", flush=True)
    if rank == 0:
        st.save_safetensors(args.output, model.state_dict(), metadata={"model": "pointer"})
        print(f"{args.output}: {sum(p.numel() for p in model.parameters())} parameters under SPEC's names")
        if args.sets:
            with torch.inference_mode():
                logp = model(read_sets(args.sets))[:, 0, :]
            st.save_safetensors(args.predictions, {"log_probs": logp})
            print(f"{args.predictions}: log_probs {list(logp.shape)}")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", required=True, help="safetensors checkpoint to write")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--batch", type=int, default=500, help="sets per iteration over all processes")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=29517, help="the processes' rendezvous port on 127.0.0.1")
    p.add_argument("--sets", help="a `max_value sets` file to predict for after training")
    p.add_argument("--predictions", help="where --sets' log-probabilities go")
    args = p.parse_args()
    if args.processes < 1 or args.iterations < 1 or args.batch % args.processes != 0 or not args.lr > 0:
        p.error("--processes and --iterations must be at least 1, --batch a multiple of --processes, --lr above 0")
    if bool(args.sets) != bool(args.predictions):
        p.error("--sets and --predictions go together")
    mp.spawn(worker, args=(args,), nprocs=args.processes, join=True)


if __name__ == "__main__":
    main()
