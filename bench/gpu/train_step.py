"""A PyTorch training-step loop for the host-probe overhead benchmark (issue 13): a small
MLP on the GPU, SGD, N steps after a warm-up, each step synchronised, so the driver sees a
steady stream of launches, copies and syncs. Prints one JSON line: steps, seconds."""
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
t = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
print(json.dumps({"steps": steps, "seconds": time.perf_counter() - t}))
