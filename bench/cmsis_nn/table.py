#!/usr/bin/env python3
"""OUT/table.md from the logs of run.sh's images (OUT/<board><level>/log.txt, bench.cpp's lines):
one table, a row per operation and shape, a column per board and optimisation level, each cell
"stformer / CMSIS-NN instructions per call = ratio" (below 1: stformer executes fewer). For the
fully connected layer CMSIS-NN's count is its better route in that column. Below it, the checks
of the outputs. Exits 1 when an output did not match or a log lacks a count.
Usage (run.sh calls it): table.py OUT "m4 m7 m55" "-O2 -Os -O3" > OUT/table.md
"""
import sys
from pathlib import Path

BOARD = {"m4": "M4", "m7": "M7", "m55": "M55"}
# (operation, shape, row label, CMSIS-NN implementations (the fewer instructions is taken), stformer's)
ROWS = [
    ("fc", "50x16x16", "fully connected 50×16×16", ["cmsis_conv1x1_fast", "cmsis_fc_per_channel"], "stformer"),
    ("fc", "50x64x16", "fully connected 50×64×16", ["cmsis_conv1x1_fast", "cmsis_fc_per_channel"], "stformer"),
    ("fc", "50x16x64", "fully connected 50×16×64", ["cmsis_conv1x1_fast", "cmsis_fc_per_channel"], "stformer"),
    ("fc", "128x128x128", "fully connected 128×128×128", ["cmsis_conv1x1_fast", "cmsis_fc_per_channel"], "stformer"),
    ("scores_s8", "50x50x16", "batch matmul to int8 50×50×16", ["cmsis_batch_matmul_s8"], "stformer"),
    ("scores_s32", "50x50x16", "attention scores int32 50×50×16", ["cmsis_mat_mult_nt_t_s8_s32"], "stformer"),
    ("softmax", "50x50", "softmax 50 rows of 50", ["cmsis_softmax_s8"], "stformer"),
]


def read(log):
    results, matches, errors, outputs, extra = {}, [], [], None, []
    for line in log.read_text(errors="replace").splitlines():
        f = line.split("|")
        if f[0] == "RESULT" and len(f) == 7:
            results[(f[1], f[2], f[3])] = float(f[4])
        elif f[0] == "MATCH" and len(f) == 7:
            matches.append((f[1], f[2], f[3], int(f[4]), int(f[5]), int(f[6])))
        elif f[0] == "ERROR" and len(f) == 7:
            errors.append((f[1], f[2], f[3], float(f[4]), float(f[5]), float(f[6])))
        elif f[0] == "OUTPUTS":
            outputs = f[1]
        elif f[0] == "KERNELS":
            extra.append(f[1])
        elif line.startswith("stack used"):
            extra.append(line)
    return results, matches, errors, outputs, extra


def main():
    out, boards, levels = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split()
    columns = [(b, lv) for b in boards for lv in levels]
    logs, problems = {}, []
    for b, lv in columns:
        log = out / f"{b}{lv}" / "log.txt"
        if log.exists():
            logs[(b, lv)] = read(log)
        else:
            problems.append(f"{BOARD[b]} {lv}: no log")

    lines = ["Instructions per call, stformer / CMSIS-NN = ratio (below 1: stformer executes fewer).", ""]
    lines.append("| operation | " + " | ".join(f"{BOARD[b]} {lv}" for b, lv in columns) + " |")
    lines.append("|---|" + "---:|" * len(columns))
    per_channel_better = False
    for op, shape, label, cmsis, stformer in ROWS:
        cells = []
        for col in columns:
            results = logs.get(col, ({},))[0]
            counts = [(results[(op, shape, c)], c) for c in cmsis if (op, shape, c) in results]
            s = results.get((op, shape, stformer))
            if not counts or s is None:
                cells.append("—")
                problems.append(f"{BOARD[col[0]]} {col[1]}: no count for {label}")
                continue
            c, which = min(counts)
            mark = "†" if which == "cmsis_fc_per_channel" else ""
            per_channel_better = per_channel_better or bool(mark)
            cells.append(f"{s:,.0f} / {c:,.0f}{mark} = {s / c:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Fully connected: CMSIS-NN's better route in each column, arm_convolve_1x1_s8_fast (its GEMM)"
                 + (", or † arm_fully_connected_per_channel_s8." if per_channel_better else " in every column."))

    # the checks: every bit-for-bit comparison, and the softmaxes' distance from a float softmax
    lines += ["", "Outputs:"]
    compared = differing = 0
    worst = {}
    for (b, lv), (_, matches, errors, outputs, extra) in logs.items():
        for op, shape, what, differ, n, largest in matches:
            compared += n
            differing += differ
            if differ:
                problems.append(f"{BOARD[b]} {lv}: {op} {shape}: {what}: {differ} of {n} differ, by up to {largest}")
        for op, shape, what, err, mean, tol in errors:
            worst[what] = max(worst.get(what, (0.0, tol))[0], err), tol
            if err > tol:
                problems.append(f"{BOARD[b]} {lv}: {op} {shape}: {what}: max error {err} above {tol}")
        if outputs == "MISMATCH":
            problems.append(f"{BOARD[b]} {lv}: the image reports a mismatch")
        elif outputs != "match":
            problems.append(f"{BOARD[b]} {lv}: the image stopped before the end of its checks")
    lines.append(f"- bit for bit (stformer, CMSIS-NN and a plain reference; fully connected, both scores): "
                 f"{differing:,} of {compared:,} outputs differ over {len(logs)} images.")
    for what, (err, tol) in worst.items():
        lines.append(f"- softmax, {what}: largest |error| {err:.5f} (tolerance {tol:.5f}).")
    for b in boards:
        kernels = sorted({e for (bb, _), log in logs.items() if bb == b for e in log[4] if not e.startswith("stack")})
        lines.append(f"- {BOARD[b]} kernels: " + " / ".join(kernels) + ".")
    if problems:
        lines += ["", "**PROBLEMS:**"] + [f"- {p}" for p in problems]
    print("\n".join(lines))
    return 1 if problems else 0


sys.exit(main())
