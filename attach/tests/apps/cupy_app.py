"""cupy_app: a CuPy RawKernel (NVRTC-compiled, loaded through the driver API).
Output: `cupy n=N launches=L threads=T checksum=C ok`."""
import sys
import cupy as cp

src = r'''
extern "C" __global__ void scale_add(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''
k = cp.RawKernel(src, "scale_add")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 3
x = cp.arange(n, dtype=cp.float32)
y = cp.zeros(n, dtype=cp.float32)
block = 256
grid = (n + block - 1) // block
for _ in range(iters):
    k((grid,), (block,), (x, y, cp.float32(1.5), cp.int32(n)))
cp.cuda.Device().synchronize()
want = cp.arange(n, dtype=cp.float32) * cp.float32(1.5 * iters)
assert bool(cp.allclose(y, want)), "mismatch"
print(f"cupy n={n} launches={iters} threads={grid * block * iters} checksum={float(y.astype(cp.float64).sum()):.6e} ok")
if len(sys.argv) > 3:
    from cupy.cuda import compiler
    open(sys.argv[3], "w").write(compiler.compile_using_nvrtc(src, arch="compute_90").decode() if False else "")
