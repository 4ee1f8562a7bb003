// sgemm: a 16x16-tiled single-precision GEMM, C = A * B, M = N = K = size. Prints a checksum
// (bit-exact across runs of the same build) and the median kernel time.
//   sgemm [size=1024] [iters=3]
// Output: `sgemm size=S iters=I grid=GxG block=16x16 launches=L threads=T checksum=C ok kernel_us=K`
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cstring>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 2; } } while (0)
#define T 16

__global__ void sgemm(const float *A, const float *B, float *C, int n) {
    __shared__ float as[T][T];
    __shared__ float bs[T][T];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += T) {
        as[threadIdx.y][threadIdx.x] = (row < n && k0 + threadIdx.x < n) ? A[row * n + k0 + threadIdx.x] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = (col < n && k0 + threadIdx.y < n) ? B[(k0 + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < T; k++) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) C[row * n + col] = acc;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1024;
    int iters = argc > 2 ? atoi(argv[2]) : 3;
    size_t nn = (size_t)n * n;
    std::vector<float> a(nn), b(nn), c(nn);
    for (size_t i = 0; i < nn; i++) { a[i] = (float)((i * 7) % 13) * 0.125f; b[i] = (float)((i * 5) % 11) * 0.0625f; }
    float *da, *db, *dc;
    CK(cudaMalloc(&da, nn * 4)); CK(cudaMalloc(&db, nn * 4)); CK(cudaMalloc(&dc, nn * 4));
    CK(cudaMemcpy(da, a.data(), nn * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), nn * 4, cudaMemcpyHostToDevice));
    dim3 block(T, T), grid((n + T - 1) / T, (n + T - 1) / T);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    std::vector<float> times;
    for (int it = 0; it < iters; it++) {
        CK(cudaEventRecord(e0));
        sgemm<<<grid, block>>>(da, db, dc, n);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        times.push_back(ms * 1000.0f);
    }
    CK(cudaMemcpy(c.data(), dc, nn * 4, cudaMemcpyDeviceToHost));
    // Spot-check 64 entries against a host reference (values are exact multiples of 2^-7).
    for (int s = 0; s < 64; s++) {
        size_t r = (size_t)(s * 2654435761u) % n, q = (size_t)(s * 40503u) % n;
        double ref = 0;
        for (int k = 0; k < n; k++) ref += (double)a[r * n + k] * b[(size_t)k * n + q];
        double got = c[r * n + q];
        if (got != ref && (got - ref > 1e-3 * (ref > 1 ? ref : 1) || ref - got > 1e-3 * (ref > 1 ? ref : 1))) {
            fprintf(stderr, "mismatch at (%zu,%zu): %f vs %f\n", r, q, got, ref); return 1;
        }
    }
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < nn; i++) { unsigned u; memcpy(&u, &c[i], 4); h = (h ^ u) * 1099511628211ull; }
    std::sort(times.begin(), times.end());
    printf("sgemm size=%d iters=%d grid=%dx%d block=16x16 launches=%d threads=%lld checksum=%016llx ok kernel_us=%.2f\n",
           n, iters, grid.x, grid.y, iters, (long long)grid.x * grid.y * T * T * iters, h, times[times.size() / 2]);
    return 0;
}
