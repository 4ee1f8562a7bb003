// What a dispatcher's idle poll of host memory costs, by the shape of its loads.
//
// A CPU thread plays the client: it writes a 256-byte queue slot (two 128-byte lines; the
// sequence word last, with a release store), then spins on a response word. One GPU warp
// plays the dispatcher: it polls the slot with the shape under test until the sequence
// word says the job is there, then answers with one relaxed system-scope store. The CPU
// times the round trip; the GPU times each poll (issue -> values back, %globaltimer).
//
// Shapes (one warp, every load a strong relaxed system-scope 16-byte load unless named):
//   line        lanes 0..7 read line 0 (one 128-byte line)
//   line+stop   the same, and lane 31 reads a stop word on another host line
//   line+dstop  the same, the stop word in device memory
//   slot        lanes 0..15 read lines 0 and 1 (the whole 256-byte slot)
//   slot+stop   the same, and lane 31's host stop word (dispatcher 0 today)
//   slot+dstop  the same, the stop word in device memory (dispatchers 1..3 today)
//   word+stop   lane 0 reads 16 bytes, lane 31 the host stop word
//   word        lane 0 reads 16 bytes (the one-load mailbox's poll)
//   2x line     line 0, then line 1 by a second instruction after the first returned
//
// Build and run (device machine): nvcc -O3 -arch=sm_90 -o poll_shape poll_shape.cu -lpthread
//   ./poll_shape [rounds]   (prints one table; JSON lines with every shape's quantiles)
#include "poll_probe.cuh"

// ---- device code (bench/tests/gpu_probes.rs compiles it with NVRTC and ptxas) ----
enum Shape { LINE, LINE_STOP, LINE_DSTOP, SLOT, SLOT_STOP, SLOT_DSTOP, WORD_STOP, WORD, TWO_LINES, NSHAPES };

// `slot`: 256 bytes of host memory; `stop_h`: a host word on its own line; `stop_d`: device.
// `resp`: the answer word (host). `polls`: per job, the GPU time of the poll that found it.
__global__ void dispatcher(int shape, int n, const char *slot, const unsigned *stop_h, const unsigned *stop_d,
                           u64 *resp, u64 *poll_ns, u64 *poll_count, u64 zero) {
    const unsigned lane = threadIdx.x & 31;
    u64 count = 0;
    for (int job = 1; job <= n; job++) {
        for (long spins = 0;; spins++) {
            u64 a = 0, b = 0;
            unsigned stop = 0;
            const u64 t0 = gtimer();
            switch (shape) {
                case LINE: case LINE_STOP: case LINE_DSTOP:
                    if (lane < 8) ld_rlx_sys_v2(slot + 16 * lane, a, b);
                    break;
                case SLOT: case SLOT_STOP: case SLOT_DSTOP:
                    if (lane < 16) ld_rlx_sys_v2(slot + 16 * lane, a, b);
                    break;
                case WORD: case WORD_STOP:
                    if (lane == 0) ld_rlx_sys_v2(slot, a, b);
                    break;
                case TWO_LINES: {
                    if (lane < 8) ld_rlx_sys_v2(slot + 16 * lane, a, b);
                    // A use of the first line's values before the second is issued.
                    const u64 s = __shfl_sync(0xffffffffu, a, 0);
                    u64 c = 0, e = 0;
                    if (lane < 8) ld_rlx_sys_v2(slot + 128 + 16 * lane + (s & zero), c, e);
                    b ^= c ^ e;
                    break;
                }
            }
            if (lane == 31) {
                if (shape == LINE_STOP || shape == SLOT_STOP || shape == WORD_STOP) stop = ld_rlx_sys32(stop_h);
                else if (shape == LINE_DSTOP || shape == SLOT_DSTOP) stop = *(volatile const unsigned *)stop_d;
            }
            const u64 seq = __shfl_sync(0xffffffffu, a, 0);
            const u64 mix = __reduce_or_sync(0xffffffffu, (unsigned)(b ^ stop));  // every value used
            const u64 t1 = gtimer();
            count++;
            if (seq == (u64)job) {
                if (lane == 0) {
                    st_rlx_sys(resp, (u64)job + (mix & 0));
                    poll_ns[job - 1] = t1 - t0;
                }
                break;
            }
            if (__shfl_sync(0xffffffffu, stop, 31) == 2 || spins > 200000000) {
                if (lane == 0) poll_count[1] = 1;  // gave up
                return;
            }
        }
    }
    if (lane == 0) poll_count[0] = count;
}

// ---- host code ----
static const char *kNames[NSHAPES] = {"line", "line+stop", "line+dstop", "slot", "slot+stop",
                                      "slot+dstop", "word+stop", "word", "2x line"};

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 3;
    const int n = 10000;
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    char *host;
    CK(cudaHostAlloc((void **)&host, 4096, cudaHostAllocMapped));
    memset(host, 0, 4096);
    char *slot = host;                          // 256 bytes: lines 0 and 1
    unsigned *stop_h = (unsigned *)(host + 1024);
    u64 *resp = (u64 *)(host + 2048);
    char *dslot, *dstop_h, *dresp;
    CK(cudaHostGetDevicePointer((void **)&dslot, slot, 0));
    CK(cudaHostGetDevicePointer((void **)&dstop_h, stop_h, 0));
    CK(cudaHostGetDevicePointer((void **)&dresp, resp, 0));
    unsigned *stop_d;
    u64 *poll_ns, *poll_count;
    CK(cudaMalloc(&stop_d, 4));
    CK(cudaMemset(stop_d, 0, 4));
    CK(cudaMalloc(&poll_ns, n * 8));
    CK(cudaMalloc(&poll_count, 16));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int drv = 0;
    CK(cudaDriverGetVersion(&drv));
    printf("# device %s, driver API %d\n", prop.name, drv);

    struct Row { double rt50, rt99, poll50, polls_per_job; };
    std::vector<std::vector<Row>> rows(NSHAPES);
    for (int r = 0; r < rounds; r++) {
        for (int s = 0; s < NSHAPES; s++) {
            memset(host, 0, 4096);
            std::atomic_thread_fence(std::memory_order_seq_cst);
            CK(cudaMemsetAsync(poll_count, 0, 16, st));
            dispatcher<<<1, 32, 0, st>>>(s, n, dslot, (const unsigned *)dstop_h, stop_d, (u64 *)dresp, poll_ns,
                                         poll_count, 0ull);
            CK(cudaGetLastError());
            // The client: one slot, ~2 us of other work between jobs.
            std::vector<double> rt(n);
            client(slot, 1, 2000, 0, (volatile u64 *)resp, n, rt.data());
            CK(cudaStreamSynchronize(st));
            std::vector<u64> pns(n);
            u64 pc[2];
            CK(cudaMemcpy(pns.data(), poll_ns, n * 8, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(pc, poll_count, 16, cudaMemcpyDeviceToHost));
            if (pc[1]) {
                fprintf(stderr, "shape %s: the GPU gave up\n", kNames[s]);
                exit(3);
            }
            std::vector<double> pv(pns.begin() + 100, pns.end());
            for (auto &x : pv) x /= 1000.0;
            std::vector<double> rv(rt.begin() + 100, rt.end());
            rows[s].push_back({q(rv, 0.5), q(rv, 0.99), q(pv, 0.5), (double)pc[0] / n});
            printf("{\"round\":%d,\"shape\":\"%s\",\"rt_p50_us\":%.3f,\"rt_p99_us\":%.3f,\"poll_p50_us\":%.3f,"
                   "\"polls_per_job\":%.2f}\n",
                   r, kNames[s], q(rv, 0.5), q(rv, 0.99), q(pv, 0.5), (double)pc[0] / n);
        }
    }
    printf("\n| shape | round trip p50 (us), by round | poll p50 (us) | polls per job |\n|---|---|---|---|\n");
    for (int s = 0; s < NSHAPES; s++) {
        printf("| %s |", kNames[s]);
        for (auto &x : rows[s]) printf(" %.2f", x.rt50);
        printf(" |");
        for (auto &x : rows[s]) printf(" %.2f", x.poll50);
        printf(" |");
        for (auto &x : rows[s]) printf(" %.1f", x.polls_per_job);
        printf(" |\n");
    }
    return 0;
}
