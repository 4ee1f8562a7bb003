// How a persistent worker should read 64-byte records from pinned host memory (row d of the
// service bench): zero-copy read bandwidth of one access pattern against another, same grid
// as the persistent kernel (2 blocks of 256 threads per SM), over 1 GiB, sum of all words.
//   per_lane   lane i reads record i with eight 8-byte loads (what a JIT-compiled program does)
//   per_lane16 the same with four 16-byte loads
//   chunked16  per_lane16 with each warp on one contiguous stretch (as a service worker)
//   coalesced  the warp reads 32 consecutive records as 16-byte loads, lane k at 16k
//   staged     the warp copies its 32 records (2 KB) to shared memory with coalesced 16-byte
//              loads, then lane i reads record i from shared memory with eight 8-byte loads
// Also the host-to-device copy engine for the same bytes. Prints GB/s, best of 5.
//   nvcc -O3 -arch=sm_90 -o zcp zero_copy_pattern.cu && ./zcp
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
typedef unsigned long long u64;
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__global__ void per_lane(const u64 *in, u64 n, u64 *out) {
  u64 s = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    const u64 *r = in + i * 8;
#pragma unroll
    for (int k = 0; k < 8; k++) s += r[k];
  }
  atomicAdd(out, s);
}
__global__ void per_lane16(const u64 *in, u64 n, u64 *out) {
  u64 s = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    const ulonglong2 *r = (const ulonglong2 *)(in + i * 8);
#pragma unroll
    for (int k = 0; k < 4; k++) { ulonglong2 v = r[k]; s += v.x + v.y; }
  }
  atomicAdd(out, s);
}
// per_lane16, but each warp walks one contiguous stretch of n / warps records (as a service
// worker walks the chunk it claimed) instead of the grid striding over the whole buffer.
__global__ void chunked16(const u64 *in, u64 n, u64 *out) {
  u64 s = 0;
  u64 lane = threadIdx.x & 31, warp = (blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5;
  u64 warps = ((u64)gridDim.x * blockDim.x) >> 5, per = (n + warps - 1) / warps;
  u64 end = (warp + 1) * per < n ? (warp + 1) * per : n;
  for (u64 i = warp * per + lane; i < end; i += 32) {
    const ulonglong2 *r = (const ulonglong2 *)(in + i * 8);
#pragma unroll
    for (int k = 0; k < 4; k++) { ulonglong2 v = r[k]; s += v.x + v.y; }
  }
  atomicAdd(out, s);
}
__global__ void coalesced(const u64 *in, u64 n, u64 *out) {
  u64 s = 0;
  const ulonglong2 *v = (const ulonglong2 *)in;
  u64 lane = threadIdx.x & 31, warp = (blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5;
  u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
  for (u64 g = warp; g * 32 < n; g += warps) {  // 32 records = 128 16-byte words
    const ulonglong2 *b = v + g * 128;
#pragma unroll
    for (int k = 0; k < 4; k++) { ulonglong2 x = b[k * 32 + lane]; s += x.x + x.y; }
  }
  atomicAdd(out, s);
}
__global__ void staged(const u64 *in, u64 n, u64 *out) {
  __shared__ ulonglong2 buf[8][128];
  u64 s = 0;
  const ulonglong2 *v = (const ulonglong2 *)in;
  unsigned lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  u64 warp = (blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5, warps = ((u64)gridDim.x * blockDim.x) >> 5;
  for (u64 g = warp; g * 32 < n; g += warps) {
    const ulonglong2 *b = v + g * 128;
    ulonglong2 t[4];
#pragma unroll
    for (int k = 0; k < 4; k++) t[k] = b[k * 32 + lane];
#pragma unroll
    for (int k = 0; k < 4; k++) buf[w][k * 32 + lane] = t[k];
    __syncwarp();
    const u64 *r = (const u64 *)&buf[w][lane * 4];
#pragma unroll
    for (int k = 0; k < 8; k++) s += r[k];
    __syncwarp();
  }
  atomicAdd(out, s);
}

int main() {
  const u64 bytes = 1ull << 30, n = bytes / 64;
  u64 *h, *d, *out;
  CK(cudaHostAlloc(&h, bytes, cudaHostAllocMapped));
  for (u64 i = 0; i < bytes / 8; i++) h[i] = i * 0x9E3779B97F4A7C15ull >> 20;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMalloc(&out, 8));
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  u64 *hd; CK(cudaHostGetDevicePointer(&hd, h, 0));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  u64 want = 0; for (u64 i = 0; i < bytes / 8; i++) want += h[i];
  const char *names[] = {"per_lane", "per_lane16", "chunked16", "coalesced", "staged"};
  void (*ks[])(const u64 *, u64, u64 *) = {per_lane, per_lane16, chunked16, coalesced, staged};
  // The service's arena is shared memory registered with cuMemHostRegister, not
  // cudaHostAlloc'd: the same bytes in registered memory too.
  u64 *reg = (u64 *)aligned_alloc(4096, bytes), *regd;
  memcpy(reg, h, bytes);
  CK(cudaHostRegister(reg, bytes, cudaHostRegisterMapped));
  CK(cudaHostGetDevicePointer(&regd, reg, 0));
  const char *srcs[] = {"host", "hostreg", "device"};
  for (int src = 0; src < 3; src++) {
    if (src == 2) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    const u64 *p = src == 2 ? d : src == 1 ? regd : hd;
    for (int k = 0; k < 5; k++) {
      float best = 1e30f; u64 got = 0;
      for (int rep = 0; rep < 5; rep++) {
        CK(cudaMemset(out, 0, 8));
        cudaEventRecord(a);
        ks[k]<<<sms * 2, 256>>>(p, n, out);
        cudaEventRecord(b); CK(cudaEventSynchronize(b));
        float ms; cudaEventElapsedTime(&ms, a, b); if (ms < best) best = ms;
        CK(cudaMemcpy(&got, out, 8, cudaMemcpyDeviceToHost));
      }
      printf("%-7s %-10s %8.1f GB/s %s\n", srcs[src], names[k], bytes / best / 1e6, got == want ? "ok" : "WRONG SUM");
    }
  }
  float best = 1e30f;
  for (int rep = 0; rep < 5; rep++) {
    cudaEventRecord(a); CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice)); cudaEventRecord(b); CK(cudaEventSynchronize(b));
    float ms; cudaEventElapsedTime(&ms, a, b); if (ms < best) best = ms;
  }
  printf("copy   host-to-device %8.1f GB/s\n", bytes / best / 1e6);
  return 0;
}
