// Where a persistent dispatcher's round trip goes besides the poll's shape
// (bench/gpu/poll_shape.cu showed the shape moves it by 0.1 us at most): the kind of host
// memory, a slot that moves through a ring (a new 4 KiB page every 16 slots, as the
// service's queue does) against one fixed slot, and a client in another process.
//
// One GPU warp polls a 256-byte slot (lanes 0..15, 16 bytes each; the stop word in device
// memory, as dispatchers 1..3 read it) until its sequence word says the job is there, then
// answers with one relaxed system-scope store to a fixed word. The client writes the slot's
// body, then its sequence word (release), then spins on the answer, and times the round trip.
//
// Variants: memory `alloc` (cudaHostAlloc) or `shm` (a /dev/shm file, mmap(MAP_SHARED),
// cudaHostRegister, as the service's region); ring of 1 or 4096 slots; the client a thread
// or a forked process (shm only); `warm`: the dispatcher also loads a word of the slot 16
// positions ahead (the next page) once per page, so its translation is cached before a job
// lands there; `pf`: once answered, the client prefetches the next slot's two lines for
// writing (1, prefetchw) or reads them (2); `resp`: how the GPU answers: 0 one 8-byte
// store, 1 the service's completion (eight field stores over two lines, then the state
// word), 2 that and then the done log's tail before the next poll (four stores to another
// line, fence.acq_rel.sys, its seq, the slot's release), 3 that with a RUNNING store to the
// state word as soon as the job is seen; `bg`: other blocks (other SMs) poll slots of
// their own back to back meanwhile, as the service's other dispatchers do; `hd`: the
// service's head store in the poll's shadow (a device store of the position, a device load
// of four positions, their minimum stored to a host word).
//
// nvcc -O3 -arch=sm_90 -o poll_ring poll_ring.cu -lpthread && ./poll_ring [rounds]
#include "poll_probe.cuh"

// ---- device code (bench/tests/gpu_probes.rs compiles it with NVRTC and ptxas) ----
// Layout of the host area: `ring` slots of 256 bytes, then the control area: the answer
// word (offset 0, a 128-byte completion), a done log (1024..5120), the client's go word
// (6144), the client's results (8192.., doubles).
__global__ void dispatcher(int n, int ring, int warm, int rk, int hd, const char *slots, u64 *resp,
                           const unsigned *stop_d, u64 *dev, u64 *poll_ns, u64 *gave_up) {
    const unsigned lane = threadIdx.x & 31;
    if (blockIdx.x > 0) {
        // A background poller: its own slot, until block 0 is done.
        const char *mine = slots + (size_t)((ring / 2 + 64 * blockIdx.x) % ring) * 256;
        u64 seen = 0;
        while (*(volatile const unsigned *)(stop_d + 1) == 0) {
            u64 a = 0, b = 0;
            if (lane < 16) ld_rlx_sys_v2(mine + 16 * lane, a, b);
            seen += __shfl_sync(0xffffffffu, a, 0) + b;
        }
        if (seen == 0x5555555555555555ull) *gave_up = 7;  // used, never true
        return;
    }
    for (int job = 1; job <= n; job++) {
        const char *slot = slots + (size_t)((job - 1) % ring) * 256;
        if (warm && ring > 16 && ((job - 1) % 16) == 8 && lane == 0) {
            u64 a, b;
            ld_rlx_sys_v2(slots + (size_t)((job - 1 + 16) % ring) * 256 + 128, a, b);
            if (a == 0x1234567ull && b == 0) *gave_up = 9;  // used, never true
        }
        for (long spins = 0;; spins++) {
            u64 a = 0, b = 0;
            const u64 t0 = gtimer();
            if (lane < 16) ld_rlx_sys_v2(slot + 16 * lane, a, b);
            const unsigned stop = lane == 31 ? *(volatile const unsigned *)stop_d : 0;
            if (hd) {
                if (lane == 0) *(volatile u64 *)dev = (u64)job;
                __syncwarp();
                u64 q = lane < 4 ? *(volatile u64 *)(dev + lane) : ~0ull;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    const u64 x = __shfl_xor_sync(0xffffffffu, q, o);
                    q = x < q ? x : q;
                }
                if (lane == 0) st_rlx_sys(resp + 15, q);
            }
            const u64 seq = __shfl_sync(0xffffffffu, a, 0);
            const unsigned mix = __reduce_or_sync(0xffffffffu, (unsigned)b ^ stop);
            const u64 t1 = gtimer();
            if (seq == (u64)job) {
                if (lane == 0) {
                    if (rk == 3) st_rlx_sys(resp, (1ull << 63) | job);  // RUNNING
                    // Some work, as a short job's run has (about 1 us), for the RUNNING store to land.
                    if (rk == 3) {
                        const u64 until = gtimer() + 1000;
                        while (gtimer() < until) {
                        }
                    }
                    if (rk >= 1) {
                        u64 *c = resp;
                        st_rlx_sys(c + 12, (u64)job * 7 + 1);  // check word (96)
                        asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"((char *)c + 4), "r"(0u) : "memory");
                        st_rlx_sys(c + 1, job);
                        st_rlx_sys(c + 2, job);
                        st_rlx_sys(c + 3, 1);
                        asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1,%2};" ::"l"(c + 4), "l"(0ull), "l"((u64)job) : "memory");
                        asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1,%2};" ::"l"(c + 8), "l"(t0), "l"(t1) : "memory");
                        st_rlx_sys(c + 10, t1 - t0);
                    }
                    st_rlx_sys(resp, (u64)job + (mix & 0));
                    if (rk >= 2) {
                        u64 *log = resp + 128 + 8 * (job & 63);
                        st_rlx_sys(log + 1, (u64)job);
                        asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1,%2};" ::"l"(log + 2), "l"(0ull), "l"(0ull) : "memory");
                        asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1,%2};" ::"l"(log + 4), "l"(0ull), "l"(t1 - t0) : "memory");
                        asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1,%2};" ::"l"(log + 6), "l"(1ull), "l"(0ull) : "memory");
                        asm volatile("fence.acq_rel.sys;" ::: "memory");
                        st_rlx_sys(log, (u64)job);
                        st_rlx_sys((void *)slot, (u64)job + 100000000ull);  // the slot's release (never a seq the client writes)
                    }
                    poll_ns[job - 1] = t1 - t0;
                }
                break;
            }
            if (__shfl_sync(0xffffffffu, stop, 31) || spins > 100000000) {
                if (lane == 0) *gave_up = 1;
                break;
            }
        }
        if (*(volatile u64 *)gave_up == 1) break;
    }
    if (lane == 0) *(volatile unsigned *)(stop_d + 1) = 1;  // the background pollers stop
}

// ---- host code ----

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 3;
    const int n = 10000, RING = 4096;
    const size_t ring_bytes = (size_t)RING * 256, bytes = ring_bytes + 8192 + n * sizeof(double) + 4096;
    // The shm area first (fork before CUDA starts in this process).
    const char *path = "/dev/shm/bpftime_poll_ring_probe";
    char *shm = shm_area(path, bytes);
    volatile u64 *go = (volatile u64 *)(shm + ring_bytes + 6144);
    // A child client for the process variants: waits for go = ring size (0 ends it).
    pid_t child = fork();
    if (child == 0) {
        for (;;) {
            u64 g;
            while ((g = *go) == 0 || g == ~0ull) usleep(50);
            if (g == 1ull << 40) _exit(0);
            client(shm, (int)(g & 0xffffff), 2000, (int)(g >> 32), (volatile u64 *)(shm + ring_bytes), n,
                   (double *)(shm + ring_bytes + 8192));
            *go = ~0ull;  // done
        }
    }
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    CK(cudaHostRegister(shm, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    char *alloc;
    CK(cudaHostAlloc((void **)&alloc, bytes, cudaHostAllocMapped));
    memset(alloc, 0, bytes);
    unsigned *stop_d;
    u64 *poll_ns, *gave_up;
    CK(cudaMalloc(&stop_d, 8));
    u64 *dev;
    CK(cudaMalloc(&dev, 64));
    CK(cudaMalloc(&poll_ns, n * 8));
    CK(cudaMalloc(&gave_up, 8));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# device %s\n", prop.name);

    struct V { const char *name; int shm, ring, proc, warm, pf, rk, bg, hd; };
    const V vs[] = {{"alloc, one slot, thread", 0, 1, 0, 0, 0, 0, 0, 0},
                    {"shm, ring, process", 1, RING, 1, 0, 0, 0, 0, 0},
                    {"shm, ring, process, fields+tail", 1, RING, 1, 0, 0, 2, 0, 0},
                    {"shm, ring, process, 1 other poller", 1, RING, 1, 0, 0, 0, 1, 0},
                    {"shm, ring, process, 3 other pollers", 1, RING, 1, 0, 0, 0, 3, 0},
                    {"shm, ring, process, 7 other pollers", 1, RING, 1, 0, 0, 0, 7, 0},
                    {"shm, ring, process, head store", 1, RING, 1, 0, 0, 0, 0, 1},
                    {"shm, ring, process, head store, 3 other pollers", 1, RING, 1, 0, 0, 0, 3, 1},
                    {"shm, ring, process, fields+tail, head store, 3 other pollers", 1, RING, 1, 0, 0, 2, 3, 1}};
    const int NV = sizeof(vs) / sizeof(vs[0]);
    std::vector<std::vector<double>> rt50(NV), rt99(NV), poll50(NV);
    std::vector<double> rt(n);
    for (int r = 0; r < rounds; r++) {
        for (int v = 0; v < NV; v++) {
            char *base = vs[v].shm ? shm : alloc;
            memset(base, 0, ring_bytes + 64);
            memset(base + ring_bytes + 128, 0, 4096);
            char *dbase;
            CK(cudaHostGetDevicePointer((void **)&dbase, base, 0));
            CK(cudaMemsetAsync(gave_up, 0, 8, st));
            CK(cudaMemsetAsync(stop_d, 0, 8, st));
            CK(cudaMemsetAsync(dev, 0, 64, st));
            dispatcher<<<1 + vs[v].bg, 32, 0, st>>>(n, vs[v].ring, vs[v].warm, vs[v].rk, vs[v].hd, dbase,
                                                    (u64 *)(dbase + ring_bytes), stop_d, dev, poll_ns, gave_up);
            CK(cudaGetLastError());
            if (vs[v].proc) {
                std::atomic_thread_fence(std::memory_order_seq_cst);
                *go = (u64)vs[v].ring | (u64)vs[v].pf << 32;
                while (*go != ~0ull) usleep(100);
                memcpy(rt.data(), shm + ring_bytes + 8192, n * sizeof(double));
            } else {
                client(base, vs[v].ring, 2000, vs[v].pf, (volatile u64 *)(base + ring_bytes), n, rt.data());
            }
            CK(cudaStreamSynchronize(st));
            u64 gu = 0;
            std::vector<u64> pns(n);
            CK(cudaMemcpy(&gu, gave_up, 8, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(pns.data(), poll_ns, n * 8, cudaMemcpyDeviceToHost));
            if (gu == 1) {
                fprintf(stderr, "%s: the GPU gave up\n", vs[v].name);
                return 3;
            }
            std::vector<double> pv, rv(rt.begin() + 100, rt.end());
            for (int i = 100; i < n; i++) pv.push_back(pns[i] / 1000.0);
            rt50[v].push_back(q(rv, 0.5));
            rt99[v].push_back(q(rv, 0.99));
            poll50[v].push_back(q(pv, 0.5));
            printf("{\"round\":%d,\"variant\":\"%s\",\"rt_p50_us\":%.3f,\"rt_p90_us\":%.3f,\"rt_p99_us\":%.3f,"
                   "\"poll_p50_us\":%.3f,\"poll_p90_us\":%.3f}\n",
                   r, vs[v].name, q(rv, 0.5), q(rv, 0.9), q(rv, 0.99), q(pv, 0.5), q(pv, 0.9));
        }
    }
    *go = 1ull << 40;
    waitpid(child, nullptr, 0);
    unlink(path);
    printf("\n| variant | round trip p50 (us), by round | p99 | poll p50 (us) |\n|---|---|---|---|\n");
    for (int v = 0; v < NV; v++) {
        printf("| %s |", vs[v].name);
        for (double x : rt50[v]) printf(" %.2f", x);
        printf(" |");
        for (double x : rt99[v]) printf(" %.2f", x);
        printf(" |");
        for (double x : poll50[v]) printf(" %.2f", x);
        printf(" |\n");
    }
    return 0;
}
