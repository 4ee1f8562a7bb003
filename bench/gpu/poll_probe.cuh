// What the poll probes (poll_shape.cu, poll_ring.cu, poll_overlap.cu) share: the CUDA
// error check, the strong system-scope loads and stores a dispatcher polls and answers
// with, the GPU clock, and the host's quantile. Each probe includes it first.
#pragma once
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

// ---- device code (bench/tests/gpu_probes.rs compiles it before each probe's) ----
typedef unsigned long long u64;

__device__ __forceinline__ void ld_rlx_sys_v2(const void *p, u64 &a, u64 &b) {
    asm volatile("ld.relaxed.sys.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
__device__ __forceinline__ unsigned ld_rlx_sys32(const void *p) {
    unsigned v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_rlx_sys(void *p, u64 v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 gtimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// ---- host code ----

// A zeroed shared mapping of `bytes` at `path` (a /dev/shm file, as the service's region),
// made before CUDA starts so that a client can be forked; exits on failure.
static char *shm_area(const char *path, size_t bytes) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, bytes) != 0) {
        perror("shm");
        exit(1);
    }
    char *shm = (char *)mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shm == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    memset(shm, 0, bytes);
    return shm;
}

// The client of a ring of `ring` 256-byte slots: n jobs, `gap_ns` of other work before
// each; a job writes its slot's body, then its sequence word (release), and spins on
// `resp`; the round trips (us) go to `out`. `pf`: once answered, prefetch the next slot's
// two lines for writing (1) or read them (2).
static void client(char *slots, int ring, long gap_ns, int pf, volatile u64 *resp, int n, double *out) {
    for (int job = 1; job <= n; job++) {
        auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(gap_ns);
        while (std::chrono::steady_clock::now() < until) {
        }
        const auto t0 = std::chrono::steady_clock::now();
        u64 *w = (u64 *)(slots + (size_t)((job - 1) % ring) * 256);
        for (int i = 1; i < 32; i++) w[i] = (u64)job * 0x9e3779b97f4a7c15ull + i;
        ((std::atomic<u64> *)w)->store((u64)job, std::memory_order_release);
        long spin = 0;
        while (*resp != (u64)job) {
            if (++spin > 2000000000L) {
                fprintf(stderr, "no answer to job %d\n", job);
                _exit(2);
            }
        }
        out[job - 1] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        const char *next = slots + (size_t)(job % ring) * 256;
        if (pf == 1) {
            asm volatile("prefetchw (%0)" ::"r"(next));
            asm volatile("prefetchw (%0)" ::"r"(next + 128));
        } else if (pf == 2) {
            (void)*(volatile const u64 *)next;
            (void)*(volatile const u64 *)(next + 128);
        }
    }
}

// The `p` quantile of `v` (0 <= p < 1).
static double q(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t)(p * v.size()))];
}
