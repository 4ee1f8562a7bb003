// load_time: times loading one PTX module and the first launch of its first kernel
// (cuModuleLoadData + cuModuleGetFunction + launch + sync), the cost a program pays once
// per module. Usage: load_time PTXFILE KERNEL   Output: `load_time bytes=B load_ms=L first_launch_ms=F`
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <cuda.h>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s: %d\n", #x, (int)r_); return 2; } } while (0)
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb"); if (!f) return 2;
    std::string s; char buf[65536]; size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, k);
    fclose(f);
    CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
    CUdeviceptr p; CK(cuMemAlloc(&p, 1 << 20));
    auto t0 = std::chrono::steady_clock::now();
    CUmodule m; CK(cuModuleLoadData(&m, s.c_str()));
    CUfunction fn; CK(cuModuleGetFunction(&fn, m, argv[2]));
    auto t1 = std::chrono::steady_clock::now();
    int n = 0; void *args[] = {&p, &p, &p, &n};
    CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, args, 0)); CK(cuCtxSynchronize());
    auto t2 = std::chrono::steady_clock::now();
    printf("load_time bytes=%zu load_ms=%.3f first_launch_ms=%.3f\n", s.size(),
           std::chrono::duration<double, std::milli>(t1 - t0).count(), std::chrono::duration<double, std::milli>(t2 - t0).count());
    return 0;
}
