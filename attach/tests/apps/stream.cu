// stream: the STREAM triad a[i] = b[i] + s * c[i] over n floats, timed with CUDA events.
// Prints a checksum of `a` (bit-exact across runs of the same build) and the median time.
//   stream [n=67108864] [iters=10]
// Output: `stream n=N iters=I launches=L threads=T checksum=C ok kernel_us=K gbps=G`
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cstring>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 2; } } while (0)

__global__ void triad(float *a, const float *b, const float *c, float s, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = b[i] + s * c[i];
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], 0, 10) : (size_t)1 << 26;
    int iters = argc > 2 ? atoi(argv[2]) : 10;
    std::vector<float> hb(n), hc(n), ha(n);
    for (size_t i = 0; i < n; i++) { hb[i] = (float)(i % 1000) * 0.5f; hc[i] = (float)(i % 777) * 0.25f; }
    float *a, *b, *c;
    CK(cudaMalloc(&a, n * 4)); CK(cudaMalloc(&b, n * 4)); CK(cudaMalloc(&c, n * 4));
    CK(cudaMemcpy(b, hb.data(), n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c, hc.data(), n * 4, cudaMemcpyHostToDevice));
    int B = 256; unsigned g = (unsigned)((n + B - 1) / B);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    std::vector<float> times;
    for (int it = 0; it < iters; it++) {
        CK(cudaEventRecord(e0));
        triad<<<g, B>>>(a, b, c, 3.0f, n);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        if (it > 0 || iters == 1) times.push_back(ms * 1000.0f);
    }
    CK(cudaMemcpy(ha.data(), a, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 4099)
        if (ha[i] != hb[i] + 3.0f * hc[i]) { fprintf(stderr, "mismatch at %zu\n", i); return 1; }
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { unsigned u; memcpy(&u, &ha[i], 4); h = (h ^ u) * 1099511628211ull; }
    std::sort(times.begin(), times.end());
    float med = times[times.size() / 2];
    printf("stream n=%zu iters=%d launches=%d threads=%zu checksum=%016llx ok kernel_us=%.2f gbps=%.1f\n",
           n, iters, iters, (size_t)g * B * iters, h, med, 12.0 * n / (med * 1e3));
    return 0;
}
