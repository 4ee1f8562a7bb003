// Can one dispatcher warp keep several polls of the same queue slot in flight, so that host
// memory is sampled more often than once a PCIe round trip?
//
// bench/gpu/poll_ring.cu measured a poll (lanes 0..15, 16 bytes each, one 256-byte slot of
// a ring in registered /dev/shm memory) at about 1.15 us, and the round trip to a client in
// another process at about 1.85 us. A job that lands just after a poll sampled the slot
// waits for that poll's return and all of the next one. Here the warp issues a new poll
// every `stagger` ns while earlier ones are still out, and takes whichever first shows the
// job.
//
// Variants: K polls in flight (1, 2, 3, 4) issued `stagger` ns apart by the same lanes, or
// K = 2 by the two half-warps (lanes 0..15 and 16..31: different threads). The client is a
// forked process that writes a slot (its body, then its sequence word with a release store)
// and spins on the answer; between jobs it works for `gap` us, which moves where in the
// polls' cycle its job lands.
//
// nvcc -O3 -arch=sm_90 -o poll_overlap poll_overlap.cu && ./poll_overlap [rounds]
#include "poll_probe.cuh"

// ---- device code (bench/tests/gpu_probes.rs compiles it with NVRTC and ptxas) ----
__device__ __forceinline__ void spin_until(u64 t) {
    while (gtimer() < t) {
    }
}

// The poll of `slot` by this lane, if `mine`.
__device__ __forceinline__ void issue(const char *slot, bool mine, unsigned chunk, u64 &a, u64 &b) {
    a = b = 0;
    if (mine) ld_rlx_sys_v2(slot + 16 * chunk, a, b);
}

// K polls in flight, `stagger` ns apart; `halves`: poll i by half-warp i % 2 (K = 2).
template <int K>
__device__ void run(int n, int ring, bool halves, u64 stagger, const char *slots, u64 *resp, u64 *polls,
                    u64 *gave_up) {
    const unsigned lane = threadIdx.x & 31, half = lane >> 4, chunk = lane & 15;
    u64 a[K], b[K];
    int job = 1;
    const char *slot = slots;
    u64 last = gtimer(), count = 0;
#pragma unroll
    for (int i = 0; i < K; i++) {
        spin_until(last + (i ? stagger : 0));
        last = gtimer();
        issue(slot, halves ? half == (unsigned)i : lane < 16, chunk, a[i], b[i]);
    }
    long spins = 0;
    for (;;) {
#pragma unroll
        for (int i = 0; i < K; i++) {
            // Poll i's sequence word: lane 0's, or lane 16's for the second half-warp.
            const u64 seq = __shfl_sync(0xffffffffu, a[i], halves ? 16 * i : 0);
            const unsigned mix = __reduce_or_sync(0xffffffffu, (unsigned)b[i]);
            count++;
            if (seq == (u64)job) {
                if (lane == 0) st_rlx_sys(resp, (u64)job + (mix & 0));
                if (++job > n) {
                    if (lane == 0) polls[0] = count;
                    return;
                }
                slot = slots + (size_t)((job - 1) % ring) * 256;
                spins = 0;
            } else if (++spins > 400000000L) {
                if (lane == 0) *gave_up = 1;
                return;
            }
            // The next poll in this register set, `stagger` after the last issue (or at
            // once, if this one came back later than that).
            spin_until(last + stagger);
            last = gtimer();
            issue(slot, halves ? half == (unsigned)i : lane < 16, chunk, a[i], b[i]);
        }
    }
}

__global__ void dispatcher(int k, int halves, u64 stagger, int n, int ring, const char *slots, u64 *resp,
                           u64 *polls, u64 *gave_up) {
    switch (k) {
        case 1: run<1>(n, ring, false, stagger, slots, resp, polls, gave_up); break;
        case 2: run<2>(n, ring, halves != 0, stagger, slots, resp, polls, gave_up); break;
        case 3: run<3>(n, ring, false, stagger, slots, resp, polls, gave_up); break;
        case 4: run<4>(n, ring, false, stagger, slots, resp, polls, gave_up); break;
    }
}

// ---- host code ----

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 2;
    const int n = 10000, RING = 4096;
    const size_t ring_bytes = (size_t)RING * 256, bytes = ring_bytes + 8192 + n * sizeof(double) + 4096;
    const char *path = "/dev/shm/bpftime_poll_overlap_probe";
    char *shm = shm_area(path, bytes);
    volatile u64 *go = (volatile u64 *)(shm + ring_bytes + 4096);
    volatile u64 *gap = (volatile u64 *)(shm + ring_bytes + 4096 + 64);
    pid_t child = fork();
    if (child == 0) {
        for (;;) {
            u64 g;
            while ((g = *go) == 0 || g == ~0ull) usleep(50);
            if (g == 2) _exit(0);
            client(shm, RING, (long)*gap, 0, (volatile u64 *)(shm + ring_bytes), n, (double *)(shm + ring_bytes + 8192));
            *go = ~0ull;
        }
    }
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    CK(cudaHostRegister(shm, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    char *dshm;
    CK(cudaHostGetDevicePointer((void **)&dshm, shm, 0));
    u64 *polls, *gave_up;
    CK(cudaMalloc(&polls, 8));
    CK(cudaMalloc(&gave_up, 8));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# device %s\n", prop.name);
    struct V { const char *name; int k, halves; u64 stagger; };
    const V vs[] = {{"K=1", 1, 0, 0},           {"K=2, 575 ns", 2, 0, 575},  {"K=2 halves, 575 ns", 2, 1, 575},
                    {"K=3, 385 ns", 3, 0, 385}, {"K=4, 290 ns", 4, 0, 290},  {"K=4, 150 ns", 4, 0, 150}};
    const int NV = sizeof(vs) / sizeof(vs[0]);
    const long gaps[] = {2000, 2300, 2600, 2900};
    const int NG = sizeof(gaps) / sizeof(gaps[0]);
    std::vector<std::vector<double>> p50(NV * NG);
    std::vector<double> rt(n);
    for (int r = 0; r < rounds; r++) {
        for (int g = 0; g < NG; g++) {
            for (int v = 0; v < NV; v++) {
                memset(shm, 0, ring_bytes + 64);
                CK(cudaMemsetAsync(gave_up, 0, 8, st));
                dispatcher<<<1, 32, 0, st>>>(vs[v].k, vs[v].halves, vs[v].stagger, n, RING, dshm,
                                             (u64 *)(dshm + ring_bytes), polls, gave_up);
                CK(cudaGetLastError());
                *gap = (u64)gaps[g];
                std::atomic_thread_fence(std::memory_order_seq_cst);
                *go = 1;
                while (*go != ~0ull) usleep(100);
                memcpy(rt.data(), shm + ring_bytes + 8192, n * sizeof(double));
                CK(cudaStreamSynchronize(st));
                u64 gu = 0, pc = 0;
                CK(cudaMemcpy(&gu, gave_up, 8, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(&pc, polls, 8, cudaMemcpyDeviceToHost));
                if (gu) {
                    fprintf(stderr, "%s: the GPU gave up\n", vs[v].name);
                    return 3;
                }
                std::vector<double> rv(rt.begin() + 100, rt.end());
                p50[v * NG + g].push_back(q(rv, 0.5));
                printf("{\"round\":%d,\"variant\":\"%s\",\"gap_ns\":%ld,\"rt_p50_us\":%.3f,\"rt_p90_us\":%.3f,"
                       "\"rt_p99_us\":%.3f,\"polls_per_job\":%.2f}\n",
                       r, vs[v].name, gaps[g], q(rv, 0.5), q(rv, 0.9), q(rv, 0.99), (double)pc / n);
            }
        }
    }
    *go = 2;
    waitpid(child, nullptr, 0);
    unlink(path);
    printf("\n| variant |");
    for (int g = 0; g < NG; g++) printf(" gap %ld ns |", gaps[g]);
    printf("\n|---|");
    for (int g = 0; g < NG; g++) printf("---|");
    printf("\n");
    for (int v = 0; v < NV; v++) {
        printf("| %s |", vs[v].name);
        for (int g = 0; g < NG; g++) {
            for (double x : p50[v * NG + g]) printf(" %.2f", x);
            printf(" |");
        }
        printf("\n");
    }
    return 0;
}
