// How long the CUDA driver takes to report a kernel fault: the floor under any "fault ->
// next job" figure of the persistent service (issue 18 row e). A persistent-style kernel
// spins on a flag in pinned host memory; the host flips the flag to make one thread
// execute `trap` (or store to an illegal address), stamps the time, and polls
// cuStreamQuery until it returns an error. Each case runs in a fresh process (the error
// is sticky): fault_latency trap|illegal  prints one JSON line.
#include <cuda.h>
#include <cstdio>
#include <cstring>
#include <chrono>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s; cuGetErrorName(r_, &s); \
  fprintf(stderr, "%s: %s\n", #x, s); return 1; } } while (0)

extern "C" __global__ void spin(volatile int *flag, int mode) {
  while (true) {
    int f = *flag;
    if (f == 1 && threadIdx.x == 0 && blockIdx.x == 0) {
      if (mode == 0) asm volatile("trap;");
      else *(volatile int *)(0x10) = 1;
    }
    if (f == 2) return;
  }
}

int main(int argc, char **argv) {
  int mode = (argc > 1 && strcmp(argv[1], "illegal") == 0) ? 1 : 0;
  CK(cuInit(0));
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  int *flag; CK(cuMemHostAlloc((void **)&flag, 4, CU_MEMHOSTALLOC_DEVICEMAP));
  *flag = 0;
  CUdeviceptr dflag; CK(cuMemHostGetDevicePointer(&dflag, flag, 0));
  CUstream s; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  int sms; CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  spin<<<sms, 256, 0, s>>>((volatile int *)dflag, mode);
  // Make sure it runs.
  for (int i = 0; i < 100; i++) { if (cuStreamQuery(s) != CUDA_ERROR_NOT_READY) { fprintf(stderr, "kernel not running\n"); return 1; } }
  auto t0 = std::chrono::steady_clock::now();
  __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
  CUresult r; long polls = 0;
  while ((r = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY) polls++;
  auto t1 = std::chrono::steady_clock::now();
  const char *name; cuGetErrorName(r, &name);
  double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  printf("{\"mode\":\"%s\",\"error\":\"%s\",\"fault_to_error_ms\":%.3f,\"polls\":%ld}\n",
         mode ? "illegal" : "trap", name, ms, polls);
  return 0;
}
