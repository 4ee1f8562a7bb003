// tick: launches a small kernel every PERIOD_MS for SECONDS (the GPU idle in between), so a
// trace sees launches from an idle GPU over a long run (clock drift, launch latency).
//   tick [seconds=12] [period_ms=10]
// Output: `tick launches=L checksum=C ok`
// Built with -DDEVICE_VAR the kernel counts into a `__device__` variable read back with
// cudaMemcpyFromSymbol: module state that a module loaded again would not share.
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <thread>
#include <cuda_runtime.h>

#ifdef DEVICE_VAR
__device__ unsigned long long counted;
#endif

__global__ void tickKernel(unsigned long long *acc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef DEVICE_VAR
    if (i < n) atomicAdd(&counted, 1ull);
#else
    if (i < n) atomicAdd(acc, 1ull);
#endif
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 12;
    int period = argc > 2 ? atoi(argv[2]) : 10;
    unsigned long long *acc, host = 0;
    if (cudaMalloc(&acc, 8) || cudaMemset(acc, 0, 8)) return 2;
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
    int launches = 0;
    while (std::chrono::steady_clock::now() < end) {
        tickKernel<<<4, 256>>>(acc, 1000);
        launches++;
        if (cudaDeviceSynchronize()) return 2;
        std::this_thread::sleep_for(std::chrono::milliseconds(period));
    }
#ifdef DEVICE_VAR
    if (cudaMemcpyFromSymbol(&host, counted, 8)) return 2;
#else
    if (cudaMemcpy(&host, acc, 8, cudaMemcpyDeviceToHost)) return 2;
#endif
    bool ok = host == 1000ull * launches;
    printf("tick launches=%d checksum=%llu %s\n", launches, host, ok ? "ok" : "MISMATCH");
    return ok ? 0 : 1;
}
