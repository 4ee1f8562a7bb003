"""torch_app: a small PyTorch run (SASS-only kernels from the wheel: the shim must warn and
leave them unmodified). Output: `torch ok checksum=C`."""
import torch
torch.manual_seed(0)
a = torch.randn(512, 512, device="cuda")
b = torch.randn(512, 512, device="cuda")
c = (a @ b).relu().sum(dim=0)
torch.cuda.synchronize()
ref = (a.cpu() @ b.cpu()).relu().sum(dim=0)
assert torch.allclose(c.cpu(), ref, rtol=1e-3, atol=1e-2), "mismatch"
print(f"torch ok checksum={float(c.double().sum()):.3e}")
