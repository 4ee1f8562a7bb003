// vecadd: the attach tests' reference app. Adds two vectors `iters` times with a known grid,
// checks the result on the host, and prints what it launched so a test can compare the
// probes' counts with the truth.
//   vecadd [n=1048576] [iters=3] [block=256]
// Output: `vecadd n=N iters=I grid=G block=B launches=L threads=T checksum=C ok kernel_us=K`
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 2; } } while (0)

__global__ void vectorAdd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 3;
    int block = argc > 3 ? atoi(argv[3]) : 256;
    int grid = (n + block - 1) / block;
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; i++) { a[i] = (float)(i % 1000) * 0.5f; b[i] = (float)(i % 777) * 0.25f; }
    float *da, *db, *dc;
    CK(cudaMalloc(&da, n * sizeof(float)));
    CK(cudaMalloc(&db, n * sizeof(float)));
    CK(cudaMalloc(&dc, n * sizeof(float)));
    CK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> times;
    for (int it = 0; it < iters; it++) {
        CK(cudaEventRecord(e0));
        vectorAdd<<<grid, block>>>(da, db, dc, n);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        times.push_back(ms * 1000.0f);
    }
    CK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (c[i] != a[i] + b[i]) { fprintf(stderr, "mismatch at %d\n", i); return 1; }
        sum += c[i];
    }
    std::sort(times.begin(), times.end());
    printf("vecadd n=%d iters=%d grid=%d block=%d launches=%d threads=%lld checksum=%.6e ok kernel_us=%.2f\n",
           n, iters, grid, block, iters, (long long)grid * block * iters, sum,
           times.empty() ? 0.0 : times[times.size() / 2]);
    return 0;
}
