"""Writes the Python-JIT part of the attach corpus: PTX from Numba, CuPy (NVRTC) and Triton.
Run on the GPU machine by build_corpus.sh: python3 corpus_py.py OUTDIR"""
import os
import sys

import numpy as np

if not hasattr(np, "row_stack"):  # Numba releases that predate NumPy 2.x's removals
    np.row_stack = np.vstack

out = sys.argv[1]
try:
    from numba import cuda, float32

    def saxpy(a, x, y, o):
        i = cuda.grid(1)
        if i < o.size:
            o[i] = a * x[i] + y[i]

    sig = (float32, float32[:], float32[:], float32[:])
    ptx, _ = cuda.compile_ptx(saxpy, sig, cc=(9, 0))
    open(os.path.join(out, "numba", "saxpy_sm90.ptx"), "w").write(ptx)
    ptx, _ = cuda.compile_ptx(saxpy, sig, cc=(9, 0), lineinfo=True)
    open(os.path.join(out, "numba", "saxpy_sm90_lineinfo.ptx"), "w").write(ptx)
    print("numba ok")
except Exception as e:  # noqa: BLE001
    print("numba failed:", repr(e))
try:
    import cupy as cp
    from cupy.cuda import compiler

    src = r'''
extern "C" __global__ void scale_add(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}'''
    ptx = None
    for arch in ("90", 90):
        try:
            ptx = compiler.compile_using_nvrtc(src, arch=arch)
            break
        except Exception as e:  # noqa: BLE001
            print("cupy arch", repr(arch), "->", repr(e))
    if isinstance(ptx, tuple):  # newer CuPy: (ptx, mapping)
        ptx = ptx[0]
    if isinstance(ptx, bytes):
        ptx = ptx.decode()
    if ptx and ".version" in ptx:
        open(os.path.join(out, "cupy", "scale_add_sm90.ptx"), "w").write(ptx)
        print("cupy ok")
    else:
        print("cupy: no PTX (got %r)" % (type(ptx),))
except Exception as e:  # noqa: BLE001
    print("cupy failed:", repr(e))
try:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * stride + offs, mask=offs < n_cols, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(out_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=offs < n_cols)

    x = torch.rand(4096, device="cuda")
    y = torch.rand(4096, device="cuda")
    o = torch.empty_like(x)
    k = add_kernel[(4,)](x, y, o, 4096, BLOCK=1024)
    open(os.path.join(out, "triton", "add_kernel.ptx"), "w").write(k.asm["ptx"])
    a = torch.rand(64, 1000, device="cuda")
    b = torch.empty_like(a)
    k = softmax_kernel[(64,)](b, a, a.stride(0), 1000, BLOCK=1024)
    open(os.path.join(out, "triton", "softmax_kernel.ptx"), "w").write(k.asm["ptx"])
    print("triton ok")
except Exception as e:  # noqa: BLE001
    print("triton failed:", repr(e))
