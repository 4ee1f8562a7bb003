// known_calls: a CUDA program whose driver calls are all known, for issue 13's device check
// of the host-probe examples (bench/gpu/host_examples.sh, host_examples.py). It goes
// through the CUDA runtime, statically linked as nvcc does by default, so every driver call
// arrives through cuGetProcAddress. Built with -rdynamic so the stacks' frames have names.
//   allocations  keep_buffers(): 3 x 1 MiB, frees 1  -> 2 MiB outstanding in 2 allocations
//                keep_table():   4000 bytes, kept    -> 4000 bytes in 1 allocation
//                main(): a 64-byte scratch buffer, a 4 MiB and a 4096-byte buffer, all freed
//   copies       host->device: 2 x 4 MiB, 3 x 4096 B; device->host: 1 x 4 MiB, 2 x 256 B
//                (pageable host memory: cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2)
//   launches     scale x 30, shift x 10, on one created stream (cuLaunchKernel)
//   syncs        cudaStreamSynchronize x 5, cudaEventSynchronize x 2, cudaDeviceSynchronize x 3
//   errors       one: cuMemFree of a pointer never allocated -> CUDA_ERROR_INVALID_VALUE (1)
// The result is checked bit for bit against the same arithmetic on the CPU.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                              \
  do {                                                                     \
    cudaError_t e_ = (x);                                                  \
    if (e_ != cudaSuccess) {                                               \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));             \
      exit(2);                                                             \
    }                                                                      \
  } while (0)

extern "C" __global__ void scale(float *x, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

extern "C" __global__ void shift(float *x, int n, float b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += b;
}

__attribute__((noinline)) void keep_buffers(void **d) {
  for (int i = 0; i < 3; i++) CK(cudaMalloc(&d[i], 1 << 20));
  CK(cudaFree(d[1]));
}

__attribute__((noinline)) void keep_table(void **t) { CK(cudaMalloc(t, 4000)); }

int main() {
  void *d[3], *t, *s;
  keep_buffers(d);
  keep_table(&t);
  CK(cudaMalloc(&s, 64));
  CK(cudaFree(s));

  const int n = 1 << 20;  // 4 MiB of floats
  std::vector<float> h(n), want(n), back(n);
  for (int i = 0; i < n; i++) want[i] = h[i] = (float)(i % 1000);
  float *x, *small;
  CK(cudaMalloc(&x, n * sizeof(float)));
  CK(cudaMalloc(&small, 4096));
  for (int i = 0; i < 2; i++) CK(cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (int i = 0; i < 3; i++) CK(cudaMemcpy(small, h.data(), 4096, cudaMemcpyHostToDevice));

  cudaStream_t st;
  cudaEvent_t ev;
  CK(cudaStreamCreate(&st));
  CK(cudaEventCreate(&ev));
  for (int r = 0; r < 10; r++) {
    for (int k = 0; k < 3; k++) scale<<<n / 256, 256, 0, st>>>(x, n, 2.0f);
    shift<<<n / 256, 256, 0, st>>>(x, n, -1.0f);
    CK(cudaGetLastError());
    if (r % 2 == 0) CK(cudaStreamSynchronize(st));
    for (int i = 0; i < n; i++) want[i] = want[i] * 2.0f * 2.0f * 2.0f + -1.0f;
  }
  for (int i = 0; i < 2; i++) {
    CK(cudaEventRecord(ev, st));
    CK(cudaEventSynchronize(ev));
  }
  for (int i = 0; i < 3; i++) CK(cudaDeviceSynchronize());

  CK(cudaMemcpy(back.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  float tail[64];
  for (int i = 0; i < 2; i++) CK(cudaMemcpy(tail, small, 256, cudaMemcpyDeviceToHost));
  int bad = memcmp(back.data(), want.data(), n * sizeof(float)) != 0 || memcmp(tail, h.data(), 256) != 0;

  CK(cudaFree(x));
  CK(cudaFree(small));
  CK(cudaEventDestroy(ev));
  CK(cudaStreamDestroy(st));
  CUresult r = cuMemFree((CUdeviceptr)0x10);  // never allocated
  printf("known_calls: cuMemFree(0x10) = %d\n", (int)r);
  if (bad) {
    printf("known_calls: WRONG RESULT\n");
    return 1;
  }
  printf("known_calls ok\n");
  return 0;
}
