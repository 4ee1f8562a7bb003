"""numba_app: a Numba CUDA kernel (PTX JIT-compiled by Numba, loaded through the driver API).
Output: `numba n=N launches=L threads=T checksum=C ok`."""
import sys
import numpy as np
if not hasattr(np, "row_stack"):  # Numba releases that predate NumPy 2.x
    np.row_stack = np.vstack
from numba import cuda

@cuda.jit
def saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 3
x = np.arange(n, dtype=np.float32)
y = np.ones(n, dtype=np.float32)
dx, dy, dout = cuda.to_device(x), cuda.to_device(y), cuda.device_array(n, dtype=np.float32)
block = 128
grid = (n + block - 1) // block
for _ in range(iters):
    saxpy[grid, block](np.float32(2.0), dx, dy, dout)
cuda.synchronize()
out = dout.copy_to_host()
assert np.array_equal(out, 2.0 * x + y), "mismatch"
print(f"numba n={n} launches={iters} threads={grid * block * iters} checksum={float(out.astype(np.float64).sum()):.6e} ok")
if len(sys.argv) > 3:  # dump the PTX for the corpus
    open(sys.argv[3], "w").write(saxpy.inspect_asm(saxpy.signatures[0]) if hasattr(saxpy, "inspect_asm") else "")
