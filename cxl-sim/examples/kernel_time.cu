// kernel_time: checks `cxl run`'s per-kernel table against CUDA events. Two kernels, one
// stream: a "short" one of SHORT_BLOCKS tiny blocks (its block 1 can end before block 0's
// entry probe has run) and a "long" one of 264 blocks that spin 100 µs, in the order short,
// long, short per turn, with an idle millisecond between turns. Each launch is timed by a
// pair of events; the first turn is a warm-up (the shim's compile) and is not summed (the
// kernel table counts it: 2 and 1 launches more).
//   kernel_time [sync=1] [short_blocks=2] [turns=30]
// Output: `kernel_time sync=S short_blocks=B short launches=N events_ms=T long launches=N events_ms=T`
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda_runtime.h>

__device__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
__global__ void short_k(float *x) {
    if (threadIdx.x == 0) x[blockIdx.x] += 1.0f;
}
__global__ void long_k(float *x) {
    spin(100000);
    if (threadIdx.x == 0) x[blockIdx.x] += 2.0f;
}

int main(int argc, char **argv) {
    const int sync = argc > 1 ? atoi(argv[1]) : 1;
    int blocks = argc > 2 ? atoi(argv[2]) : 2;
    if (blocks < 1) blocks = 1;
    if (blocks > 4096) blocks = 4096;  // x has a float per block
    const int turns = argc > 3 ? atoi(argv[3]) : 30;
    float *x;
    if (cudaMalloc(&x, 4096 * sizeof(float)) != cudaSuccess) return 2;
    cudaMemset(x, 0, 4096 * sizeof(float));
    cudaEvent_t e[6];
    for (auto &v : e) cudaEventCreate(&v);
    double ts = 0, tl = 0;
    int ns = 0, nl = 0;
    for (int it = 0; it < turns; it++) {
        cudaEventRecord(e[0]);
        short_k<<<blocks, 128>>>(x);
        cudaEventRecord(e[1]);
        if (sync) cudaDeviceSynchronize();
        cudaEventRecord(e[2]);
        long_k<<<264, 128>>>(x);
        cudaEventRecord(e[3]);
        if (sync) cudaDeviceSynchronize();
        cudaEventRecord(e[4]);
        short_k<<<blocks, 128>>>(x);
        cudaEventRecord(e[5]);
        if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
            fprintf(stderr, "kernel_time: a launch failed\n");
            return 2;
        }
        struct timespec idle = {0, 1000000};
        nanosleep(&idle, nullptr);
        if (it == 0) continue;
        float ms;
        cudaEventElapsedTime(&ms, e[0], e[1]);
        ts += ms;
        cudaEventElapsedTime(&ms, e[2], e[3]);
        tl += ms;
        cudaEventElapsedTime(&ms, e[4], e[5]);
        ts += ms;
        ns += 2;
        nl += 1;
    }
    printf("kernel_time sync=%d short_blocks=%d short launches=%d events_ms=%.3f long launches=%d events_ms=%.3f\n",
           sync, blocks, ns, ts, nl, tl);
    return 0;
}
