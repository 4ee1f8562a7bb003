// gather: out[i] = in[idx[i]] with random indices over a large table: every warp's request
// touches 32 sectors, the access pattern CXL pays most for.
//   gather [n=16777216] [table_mib=1024] [iters=5]
// Output: `gather n=N table_mib=T checksum=C ok kernel_us=K`
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 2; } } while (0)

__global__ void gather(float *out, const float *in, const unsigned *idx, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[idx[i]];
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], 0, 10) : (size_t)1 << 24;
    size_t table = (argc > 2 ? strtoull(argv[2], 0, 10) : 1024) << 20 >> 2;
    int iters = argc > 3 ? atoi(argv[3]) : 5;
    std::vector<float> hin(table);
    std::vector<unsigned> hidx(n);
    std::mt19937 rng(7);
    for (size_t i = 0; i < table; i++) hin[i] = (float)(i % 9973);
    for (size_t i = 0; i < n; i++) hidx[i] = rng() % table;
    float *in, *out; unsigned *idx;
    CK(cudaMalloc(&in, table * 4)); CK(cudaMalloc(&out, n * 4)); CK(cudaMalloc(&idx, n * 4));
    CK(cudaMemcpy(in, hin.data(), table * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(idx, hidx.data(), n * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    std::vector<float> us;
    for (int it = 0; it < iters; it++) {
        CK(cudaEventRecord(e0));
        gather<<<(unsigned)((n + 255) / 256), 256>>>(out, in, idx, n);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        if (it > 0 || iters == 1) us.push_back(ms * 1e3f);
    }
    std::vector<float> hout(n);
    CK(cudaMemcpy(hout.data(), out, n * 4, cudaMemcpyDeviceToHost));
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        if (hout[i] != hin[hidx[i]]) { fprintf(stderr, "mismatch at %zu\n", i); return 1; }
        h = (h ^ (unsigned long long)hout[i]) * 1099511628211ull;
    }
    std::sort(us.begin(), us.end());
    printf("gather n=%zu table_mib=%zu checksum=%016llx ok kernel_us=%.2f\n", n, table * 4 >> 20, h,
           us[us.size() / 2]);
    return 0;
}
