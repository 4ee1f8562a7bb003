"""A PyTorch training-step loop for the host-probe overhead benchmark (issue 13): a small
MLP on the GPU, SGD, N steps after a warm-up, each step synchronised, so the driver sees a
steady stream of launches, copies and syncs.

`train_step.py STEPS`: prints one JSON line: steps, seconds, and the median and 10th/90th
percentiles of the per-step times.

`train_step.py STEPS PAIRS` (under `trace` with host probes): PAIRS pairs of blocks of
STEPS steps in one process, one block with the probes running and one with them paused
through the shim's `bpftime_host_probes_pause`, the order alternating from pair to pair. Prints
each block's median step time and the ratio of the medians, probes on over off, per pair.
One process compares like with like. Separate processes differ by several percent from
run to run: clocks, cores, allocations."""
import ctypes
import json
import random
import statistics
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 0
torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024)
).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024)
y = torch.randn(256, 1024)


def step():
    xb, yb = x.to(dev, non_blocking=False), y.to(dev, non_blocking=False)
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    opt.step()
    return loss.item()  # a device-to-host copy and a sync every step


def block(n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()  # ends in loss.item(): the step's GPU work is done when it returns
        times.append(time.perf_counter() - t0)
    return times


def pick(times, q):
    s = sorted(times)
    return s[min(len(s) - 1, int(q * len(s)))]


for _ in range(30):
    step()
torch.cuda.synchronize()
if pairs == 0:
    t = time.perf_counter()
    times = block(steps)
    torch.cuda.synchronize()
    total = time.perf_counter() - t
    print(json.dumps({"steps": steps, "seconds": total, "step_median_s": pick(times, 0.5),
                      "step_p10_s": pick(times, 0.1), "step_p90_s": pick(times, 0.9)}))
    sys.exit(0)

try:
    pause = ctypes.CDLL(None).bpftime_host_probes_pause
except AttributeError:
    sys.exit("train_step.py STEPS PAIRS needs trace's shim (bpftime_host_probes_pause)")
pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
rows = []
for p in range(pairs):
    med = {}
    # Probes first in even pairs, second in odd ones, so that an order effect cancels.
    for on in ((True, False) if p % 2 == 0 else (False, True)):
        pause(0 if on else 1)
        med["on" if on else "off"] = pick(block(steps), 0.5)
    rows.append({"pair": p, "on_s": med["on"], "off_s": med["off"], "ratio": med["on"] / med["off"]})
pause(0)
ratios = sorted(r["ratio"] for r in rows)
boot = random.Random(1)
meds = sorted(statistics.median(boot.choices(ratios, k=len(ratios))) for _ in range(10000))
print(json.dumps({"steps_per_block": steps, "pairs": pairs, "rows": rows,
                  "ratio_median": statistics.median(ratios),
                  "ratio_ci95": [meds[250], meds[9750]],
                  "on_median_s": statistics.median(r["on_s"] for r in rows),
                  "off_median_s": statistics.median(r["off_s"] for r in rows)}))
