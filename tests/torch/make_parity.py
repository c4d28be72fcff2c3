#!/usr/bin/python3
"""Writes the PyTorch side of the parity test: for three SPEC models, the weights, inputs,
outputs, loss, every parameter gradient, and the losses and parameters after 10 AdamW steps.

usage: /usr/bin/python3 tests/torch/make_parity.py OUT_DIR
writes OUT_DIR/{pointer,set,lm}.safetensors with tensors
  param.<name>   initial weights (SPEC names)        input.*   inputs and targets
  output         model output                        loss      [1]
  grad.<name>    dL/d<name> at the initial weights
  step_losses    [10] loss before each AdamW step     final.<name> weights after the 10 steps
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import stformer_torch as st  # noqa: E402

torch.set_num_threads(1)
LR, WD, STEPS = 0.01, 0.01, 10


def case(path, model, inputs, loss_fn):
    params = {f"param.{n}": p.detach().clone() for n, p in model.named_parameters()}
    out = model(*inputs["args"])
    loss = loss_fn(out)
    loss.backward()
    tensors = dict(params)
    tensors.update({f"input.{k}": v for k, v in inputs["save"].items()})
    tensors["output"] = out.detach()
    tensors["loss"] = loss.detach().reshape(1)
    tensors.update({f"grad.{n}": p.grad.detach().clone() for n, p in model.named_parameters()})
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = loss_fn(model(*inputs["args"]))
        losses.append(loss.item())
        loss.backward()
        opt.step()
    tensors["step_losses"] = torch.tensor(losses, dtype=torch.float32)
    tensors.update({f"final.{n}": p.detach().clone() for n, p in model.named_parameters()})
    st.save_safetensors(path, tensors, {"torch": torch.__version__})


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)

    # Encoder blocks: SPEC's pointer model (smaller), padded sets, NLL of the largest-norm point.
    b, n = 4, 12
    x = torch.randn(b, n, 2) + torch.randn(b, 1, 2)
    lengths = torch.tensor([12, 9, 12, 5])
    keys = torch.arange(n)[None, :] < lengths[:, None]
    norms = x.norm(dim=-1).masked_fill(~keys, -1)
    target = norms.argmax(-1)
    model = st.PointerModel(2, 16, 2, 32, 2)
    case(os.path.join(out_dir, "pointer.safetensors"), model,
         {"args": (x, keys), "save": {"x": x, "keys": keys, "target": target.int()}},
         lambda logp: torch.nn.functional.nll_loss(logp[:, 0, :], target))

    # Set Transformer (ISAB + PMA), mean Euclidean distance to the largest-norm point.
    x = torch.randn(b, n, 2) + torch.randn(b, 1, 2)
    y = x[torch.arange(b), x.norm(dim=-1).argmax(-1)]
    model = st.SetTransformer(2, 16, 4, 4, 2)
    case(os.path.join(out_dir, "set.safetensors"), model,
         {"args": (x,), "save": {"x": x, "y": y[:, None, :]}},
         lambda pred: (pred[:, 0, :] - y).norm(dim=-1).mean())

    # A small language model, softmax cross-entropy on the next token.
    v, length = 50, 8
    ids = torch.randint(0, v, (b, length))
    nxt = torch.randint(0, v, (b,))
    model = st.LanguageModel(v, length, 16, 2, 32, 2)
    case(os.path.join(out_dir, "lm.safetensors"), model,
         {"args": (ids,), "save": {"ids": ids.int(), "target": nxt.int()}},
         lambda logits: torch.nn.functional.cross_entropy(logits[:, 0, :], nxt))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "parity")
