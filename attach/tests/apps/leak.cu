// leak: known device allocations and one known driver error, for the host-probe examples
// on a real driver (bench/gpu/host_examples.sh). Through the CUDA runtime (statically
// linked, as nvcc does by default), so the driver calls arrive via cuGetProcAddress.
//   keep_buffers(): 3 x 1 MiB cudaMalloc, frees 1  -> 2 MiB outstanding, 2 allocations
//   keep_table():   1 x 4000 bytes, kept           -> 4000 bytes, 1 allocation
//   main():         a 64-byte scratch buffer, freed; then cuMemFree of a pointer that was
//                   never allocated: CUDA_ERROR_INVALID_VALUE (1) from cuMemFree_v2.
// Built with -rdynamic so the stacks' frames have names.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>

__attribute__((noinline)) int keep_buffers(void **d) {
  for (int i = 0; i < 3; i++)
    if (cudaMalloc(&d[i], 1 << 20) != cudaSuccess) return 1;
  return cudaFree(d[1]) != cudaSuccess;
}

__attribute__((noinline)) int keep_table(void **t) { return cudaMalloc(t, 4000) != cudaSuccess; }

int main() {
  void *d[3], *t, *s;
  if (keep_buffers(d) || keep_table(&t)) return 2;
  if (cudaMalloc(&s, 64) != cudaSuccess || cudaFree(s) != cudaSuccess) return 3;
  CUresult r = cuMemFree((CUdeviceptr)0x10);  // never allocated
  printf("leak: cuMemFree(0x10) = %d\n", (int)r);
  printf("leak ok\n");
  return 0;
}
