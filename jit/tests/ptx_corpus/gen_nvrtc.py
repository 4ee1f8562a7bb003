#!/usr/bin/env python3
"""Regenerates jit/tests/ptx_corpus/nvrtc/*.ptx: realistic CUDA kernels compiled to PTX by
NVRTC (the PyPI wheel nvidia-cuda-nvrtc-cu12), called through ctypes.

    python3 -m pip install --user nvidia-cuda-nvrtc-cu12 nvidia-cuda-cccl-cu12
    python3 jit/tests/ptx_corpus/gen_nvrtc.py

The files are committed; the Rust tests (jit/tests/ptx_parse.rs) only read them.
"""

import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "nvrtc")
ARCHS = ["compute_52", "compute_70", "compute_80", "compute_90"]

SOURCES = {
    # Vector add, a struct passed by value, early returns around __syncthreads.
    "basic": r"""
extern "C" __global__ void vector_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

struct Params {
    float scale;
    float bias;
    int n;
    int stride;
    double extra[2];
};

extern "C" __global__ void saxpy_struct(Params p, const float *__restrict__ x, float *__restrict__ y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += p.stride)
        y[i] = p.scale * x[i] + p.bias + (float)p.extra[i & 1];
}

extern "C" __global__ void __launch_bounds__(256, 2)
early_exit(const int *in, int *out, int n, int mode)
{
    __shared__ int tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (mode == 0)
        return;
    tile[threadIdx.x] = i < n ? in[i] : 0;
    __syncthreads();
    if (i >= n)
        return;
    int v = tile[(threadIdx.x + 1) % blockDim.x];
    if (v < 0) {
        out[i] = -v;
        return;
    }
    out[i] = v * mode;
}

template <typename T>
__global__ void scale_tpl(T *data, T factor, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        data[i] *= factor;
}

template __global__ void scale_tpl<float>(float *, float, unsigned);
template __global__ void scale_tpl<double>(double *, double, unsigned);
""",
    # Tiled SGEMM with shared memory.
    "sgemm": r"""
#define TILE 16
extern "C" __global__ void sgemm_tiled(const float *A, const float *B, float *C,
                                       int M, int N, int K, float alpha, float beta)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + threadIdx.x;
        int bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && bk < K) ? B[bk * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = alpha * acc + beta * C[row * N + col];
}

extern "C" __global__ void sgemm_vec4(const float4 *__restrict__ A, float4 *__restrict__ C, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = __ldg(&A[i]);
        v.x *= 2.0f; v.y *= 0.5f; v.z += 1.0f; v.w = -v.w;
        C[i] = v;
    }
}
""",
    # Reductions with warp shuffles, dynamic shared memory and atomics.
    "reduce": r"""
__device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

extern "C" __global__ void reduce_sum(const float *in, float *out, unsigned n)
{
    extern __shared__ float partial[];
    float v = 0.0f;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v += in[i];
    v = warp_sum(v);
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x + 31) / 32 ? partial[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0)
            atomicAdd(out, v);
    }
}

extern "C" __global__ void histogram(const unsigned char *data, unsigned *bins, int n)
{
    __shared__ unsigned local[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
        local[i] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
        atomicAdd(&bins[i], local[i]);
}
""",
    # Device function calls that stay calls (noinline), printf, globals and constants.
    "calls": r"""
__constant__ float coeffs[4] = {1.0f, 0.5f, 0.25f, 0.125f};
__device__ int counter = 7;
__device__ unsigned long long table[3] = {1ull, 2ull, 0xdeadbeefcafef00dull};

struct Pair { float a; float b; };

__device__ __noinline__ float poly(float x)
{
    return coeffs[0] + x * (coeffs[1] + x * (coeffs[2] + x * coeffs[3]));
}

__device__ __noinline__ Pair split(float x, int k)
{
    Pair p;
    p.a = x * k;
    p.b = x - k;
    return p;
}

__device__ __noinline__ void bump(int *where, int by)
{
    atomicAdd(where, by);
}

extern "C" __global__ void calls_kernel(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float y = poly(in[i]);
    Pair p = split(y, i & 7);
    out[i] = p.a + p.b + (float)table[i % 3];
    bump(&counter, 1);
    if (i == 0)
        printf("n=%d first=%f\n", n, out[0]);
}

extern "C" __global__ void recursive_kernel(int *out, int depth);

__device__ __noinline__ int fib(int k)
{
    return k < 2 ? k : fib(k - 1) + fib(k - 2);
}

extern "C" __global__ void recursive_kernel(int *out, int depth)
{
    out[threadIdx.x] = fib(depth + (int)threadIdx.x % 3);
}
""",
    # Atomics of several kinds and widths, a CAS loop, fences.
    "atomics": r"""
__device__ float atomic_max_float(float *addr, float value)
{
    int *ai = (int *)addr;
    int old = *ai, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= value)
            break;
        old = atomicCAS(ai, assumed, __float_as_int(value));
    } while (assumed != old);
    return __int_as_float(old);
}

extern "C" __global__ void atomics_kernel(int *ints, unsigned long long *u64s, float *fmax,
                                          double *dsum, const float *vals, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    atomicAdd(&ints[0], 1);
    atomicMax(&ints[1], i);
    atomicMin(&ints[2], -i);
    atomicExch(&ints[3], i);
    atomicAnd(&ints[4], ~i);
    atomicOr(&ints[5], i);
    atomicXor(&ints[6], i);
    atomicInc((unsigned *)&ints[7], 100u);
    atomicAdd(&u64s[0], (unsigned long long)i);
    atomicCAS(&u64s[1], 0ull, (unsigned long long)i);
    atomic_max_float(fmax, vals[i]);
#if __CUDA_ARCH__ >= 600
    atomicAdd(dsum, (double)vals[i]);
#endif
    __threadfence();
    if (threadIdx.x == 0)
        __threadfence_system();
}
""",
    # Hopper: thread-block clusters, distributed shared memory, warp reductions.
    "hopper": r"""
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive;\n\tbarrier.cluster.wait;" ::: "memory");
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_sum(const int *in, int *out)
{
    __shared__ int smem[32];
    unsigned rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    int v = __reduce_add_sync(0xffffffffu, in[blockIdx.x * blockDim.x + threadIdx.x]);
    if (threadIdx.x == 0)
        smem[0] = v + (int)rank;
    cluster_sync();
    unsigned local = (unsigned)__cvta_generic_to_shared(smem), remote, peer_val;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank ^ 1));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(peer_val) : "r"(remote));
    if (threadIdx.x == 0)
        out[blockIdx.x] = smem[0] + (int)peer_val;
    cluster_sync();
}

extern "C" __global__ void __launch_bounds__(128) nanosleep_spin(volatile int *flag, int *out)
{
    while (*flag == 0)
        __nanosleep(100);
    out[threadIdx.x] = __reduce_max_sync(0xffffffffu, (int)threadIdx.x);
}
""",
    # CUB block primitives (the PyPI wheel nvidia-cuda-cccl-cu12): heavy templates, hundreds
    # of module-scope globals, inline-asm blocks with their own `.reg`s.
    "cub": r"""
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_radix_sort.cuh>

extern "C" __global__ void __launch_bounds__(128) cub_block_ops(const int *in, int *sums, int *scanned, int *sorted)
{
    using Reduce = cub::BlockReduce<int, 128>;
    using Scan = cub::BlockScan<int, 128>;
    using Sort = cub::BlockRadixSort<int, 128, 4>;
    __shared__ union {
        typename Reduce::TempStorage reduce;
        typename Scan::TempStorage scan;
        typename Sort::TempStorage sort;
    } tmp;
    int base = blockIdx.x * 512;
    int v = in[base + threadIdx.x];
    int total = Reduce(tmp.reduce).Sum(v);
    if (threadIdx.x == 0)
        sums[blockIdx.x] = total;
    __syncthreads();
    int excl;
    Scan(tmp.scan).ExclusiveSum(v, excl);
    scanned[base + threadIdx.x] = excl;
    __syncthreads();
    int keys[4];
    for (int k = 0; k < 4; ++k)
        keys[k] = in[base + threadIdx.x * 4 + k];
    Sort(tmp.sort).Sort(keys);
    for (int k = 0; k < 4; ++k)
        sorted[base + threadIdx.x * 4 + k] = keys[k];
}
""",
}


def example_kernels(path):
    """The device code of a CUDA example of this repository: from its first `#define` of
    the kernel's constants to `int main(` (the host code needs the CUDA runtime headers)."""
    with open(os.path.join(HERE, "..", "..", "..", path)) as f:
        src = f.read()
    return src[src.index("#define BM") : src.index("int main(")]


# The compute-bound SGEMM of cxl-sim's examples (128 x 128 tiles, float4 loads).
SOURCES["sgemm_rb"] = example_kernels("cxl-sim/examples/sgemm_rb.cu")

# (name, source, extra options, archs); `{cccl}` is the CCCL include directory.
BUILDS = [(name, name, [], ARCHS) for name in SOURCES if name not in ("hopper", "cub", "sgemm_rb")] + [
    ("sgemm_rb", "sgemm_rb", ["-default-device"], ["compute_90"]),
    ("hopper", "hopper", [], ["compute_90"]),
    ("cub", "cub", ["-I{cccl}", "-default-device"], ["compute_90"]),
    # Full debug info: `.section .debug_*` blocks, `.loc` with inlined-at, no optimisation.
    ("calls_debug", "calls", ["-G"], ["compute_80"]),
    ("basic_debug", "basic", ["-G"], ["compute_70"]),
]


def load_nvrtc():
    import nvidia.cuda_nvrtc  # noqa: F401 (locates the wheel)

    libdir = os.path.join(list(nvidia.cuda_nvrtc.__path__)[0], "lib")
    for name in ["libnvrtc.so.12", "libnvrtc.so"]:
        p = os.path.join(libdir, name)
        if os.path.exists(p):
            return ctypes.CDLL(p)
    sys.exit(f"libnvrtc not found in {libdir}")


def compile_ptx(lib, src, name, opts):
    prog = ctypes.c_void_p()
    r = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), f"{name}.cu".encode(), 0, None, None)
    if r != 0:
        raise RuntimeError(f"nvrtcCreateProgram: {r}")
    copts = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    r = lib.nvrtcCompileProgram(prog, len(opts), copts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if r != 0:
        raise RuntimeError(f"nvrtc failed for {name} {opts}:\n{log.value.decode()}")
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def cccl_include():
    import nvidia.cuda_cccl  # noqa: F401 (locates the wheel)

    return os.path.join(list(nvidia.cuda_cccl.__path__)[0], "include")


def main():
    lib = load_nvrtc()
    cccl = cccl_include()
    os.makedirs(OUT, exist_ok=True)
    # NVRTC puts the working directory into `.file` paths: make them machine-independent.
    os.chdir("/")
    for out_name, src_name, extra, archs in BUILDS:
        for arch in archs:
            opts = [f"--gpu-architecture={arch}", "--std=c++17"] + [o.format(cccl=cccl) for o in extra]
            if "-G" not in extra:
                opts.append("--generate-line-info")
            ptx = compile_ptx(lib, SOURCES[src_name], src_name, opts)
            path = os.path.join(OUT, f"{out_name}_{arch.split('_')[1]}.ptx")
            with open(path, "w") as f:
                f.write(ptx)
            print(f"{path}: {len(ptx)} bytes")


if __name__ == "__main__":
    main()
