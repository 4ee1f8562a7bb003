#!/usr/bin/env python3
"""Runs PTX instrumented by `cargo run -p jit --example count_probes` on a GPU and checks
that every thread ran exactly one entry probe and one exit probe, and that the kernels
still compute what they computed before.

On the development machine:
    mkdir -p /tmp/probe_out
    for f in nvrtc/basic_90 nvrtc/reduce_90 nvrtc/calls_90 hand/edge_cases; do
        cargo run -q -p jit --example count_probes -- jit/tests/ptx_corpus/$f.ptx \
            > /tmp/probe_out/$(basename $f).ptx
    done
then, with /tmp/probe_out and this script copied to the GPU machine (driver only, through
ctypes; no toolkit needed):
    python3 probe_counts.py /tmp/probe_out
Results: bench/results/jit_probe_counts.md.
"""

import ctypes
import os
import struct
import sys

cu = ctypes.CDLL("libcuda.so.1")


def chk(r, what):
    if r != 0:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(r, ctypes.byref(name))
        raise RuntimeError(f"{what}: CUDA error {r} {name.value}")


chk(cu.cuInit(0), "cuInit")
dev = ctypes.c_int()
chk(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
chk(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
chk(cu.cuCtxSetCurrent(ctx), "set current")
drv = ctypes.c_int()
cu.cuDriverGetVersion(ctypes.byref(drv))
print(f"driver {drv.value}")


def load(path):
    text = open(path).read()
    mod = ctypes.c_void_p()
    log = ctypes.create_string_buffer(8192)
    # CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
    opts = (ctypes.c_int * 2)(5, 6)
    vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(8192))
    r = cu.cuModuleLoadDataEx(ctypes.byref(mod), text.encode() + b"\0", 2, opts, vals)
    if r != 0:
        print(log.value.decode(errors="replace"))
    chk(r, f"load {path}")
    return mod


def func(mod, name):
    f = ctypes.c_void_p()
    chk(cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), f"function {name}")
    return f


def alloc(nbytes):
    p = ctypes.c_uint64()
    chk(cu.cuMemAlloc_v2(ctypes.byref(p), max(nbytes, 8)), "alloc")
    chk(cu.cuMemsetD8_v2(p, 0, max(nbytes, 8)), "memset")
    return p.value


def h2d(dptr, data):
    chk(cu.cuMemcpyHtoD_v2(ctypes.c_uint64(dptr), data, len(data)), "h2d")


def d2h(dptr, n):
    buf = ctypes.create_string_buffer(n)
    chk(cu.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(dptr), n), "d2h")
    return buf.raw


def counts_ptr(mod):
    p = ctypes.c_uint64()
    size = ctypes.c_size_t()
    chk(cu.cuModuleGetGlobal_v2(ctypes.byref(p), ctypes.byref(size), mod, b"__bpftime_counts"), "global")
    return p.value


def launch(mod, name, grid, block, args, shmem=0):
    """args: list of ctypes values."""
    cp = counts_ptr(mod)
    chk(cu.cuMemsetD8_v2(ctypes.c_uint64(cp), 0, 16), "zero counts")
    ptrs = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    chk(
        cu.cuLaunchKernel(func(mod, name), grid, 1, 1, block, 1, 1, shmem, None, ptrs, None),
        f"launch {name}",
    )
    chk(cu.cuCtxSynchronize(), f"sync {name}")
    entries, exits = struct.unpack("<QQ", d2h(cp, 16))
    threads = grid * block
    ok = entries == threads and exits == threads
    print(f"{'OK  ' if ok else 'FAIL'} {name} grid={grid} block={block}: entries={entries} exits={exits} threads={threads}")
    return ok


def main():
    d = sys.argv[1]
    ok = True
    u64, i32, u32, f32 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint32, ctypes.c_float

    m = load(os.path.join(d, "basic_90.ptx"))
    n = 1000
    a, b, c = alloc(4 * n), alloc(4 * n), alloc(4 * n)
    h2d(a, struct.pack(f"<{n}f", *[float(i) for i in range(n)]))
    h2d(b, struct.pack(f"<{n}f", *[2.0 * i for i in range(n)]))
    ok &= launch(m, "vector_add", 8, 128, [u64(a), u64(b), u64(c), i32(n)])
    got = struct.unpack(f"<{n}f", d2h(c, 4 * n))
    vok = all(got[i] == 3.0 * i for i in range(n))
    print(f"{'OK  ' if vok else 'FAIL'} vector_add results")
    ok &= vok
    ins, outs = alloc(4 * 512), alloc(4 * 512)
    h2d(ins, struct.pack("<512i", *[i - 100 for i in range(512)]))
    for mode in (0, 3):
        ok &= launch(m, "early_exit", 2, 256, [u64(ins), u64(outs), i32(500), i32(mode)])

    m = load(os.path.join(d, "reduce_90.ptx"))
    n = 4096
    src, out = alloc(4 * n), alloc(4)
    h2d(src, struct.pack(f"<{n}f", *([1.0] * n)))
    ok &= launch(m, "reduce_sum", 4, 256, [u64(src), u64(out), u32(n)], shmem=4 * 8)
    total = struct.unpack("<f", d2h(out, 4))[0]
    rok = total == float(n)
    print(f"{'OK  ' if rok else 'FAIL'} reduce_sum result {total}")
    ok &= rok

    m = load(os.path.join(d, "calls_90.ptx"))
    ok &= launch(m, "recursive_kernel", 1, 32, [u64(alloc(4 * 32)), i32(4)])
    ok &= launch(m, "calls_kernel", 2, 64, [u64(alloc(4 * 128)), u64(alloc(4 * 128)), i32(100)])

    m = load(os.path.join(d, "edge_cases.ptx"))
    for n in (0, 5):
        ok &= launch(m, "guard_last", 2, 64, [u32(n)])
    ok &= launch(m, "no_params", 1, 32, [], shmem=16)
    ok &= launch(m, "no_list", 3, 32, [])
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
