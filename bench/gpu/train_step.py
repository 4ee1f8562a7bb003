"""A PyTorch training-step loop for the host-probe overhead benchmark (issue 13): a small
MLP on the GPU, SGD, N steps after a warm-up, each step synchronised, so the driver sees a
steady stream of launches, copies and syncs. Prints one JSON line: steps, seconds, and the
median and 10th/90th percentiles of the per-step times (robust to the host's scheduling
hiccups, which move the total by several percent from run to run)."""
import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
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


for _ in range(30):
    step()
torch.cuda.synchronize()
times = []
t = time.perf_counter()
for _ in range(steps):
    t0 = time.perf_counter()
    step()  # ends in loss.item(): the step's GPU work is done when it returns
    times.append(time.perf_counter() - t0)
torch.cuda.synchronize()
total = time.perf_counter() - t
times.sort()
pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]
print(json.dumps({"steps": steps, "seconds": total, "step_median_s": pick(0.5),
                  "step_p10_s": pick(0.1), "step_p90_s": pick(0.9)}))
