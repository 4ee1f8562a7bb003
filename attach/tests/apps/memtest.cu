// memtest: kernels with known memory access patterns, for the memory-probe device tests
// (attach/tests/gpu/mem.py). Prints each kernel's buffers and sizes so the checker can
// compute every address, count and value the probes must see.
//   memtest [n=1048576]
// Output: one `kernel=NAME key=value ...` line per kernel, then `memtest checksum=C ok`.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 2; } } while (0)

// Strided reads: lane i reads in[i * stride], writes out[i].
__global__ void strided(const unsigned *in, unsigned *out, int n, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[(size_t)i * stride];
}

// A gather through an index array.
__global__ void gather(const unsigned *in, const unsigned *idx, unsigned *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[idx[i]];
}

// 16-byte vector loads and stores.
__global__ void vec4(const uint4 *in, uint4 *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

// A reduction (result unused: red) and an atomic whose old value is stored (atom).
__global__ void atomics(unsigned *c, unsigned *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&c[i & 7], 1u);
        out[i] = atomicAdd(&c[8 + (i & 7)], 2u);
    }
}

// Generic pointers into shared memory: which space `p` is in is only known at run time.
__global__ void generic(int flag, unsigned *out, int n) {
    __shared__ unsigned s[256];
    unsigned *p = flag ? s : out + blockIdx.x * 256;
    p[threadIdx.x] = threadIdx.x * 5;
    __syncthreads();
    unsigned v = p[255 - threadIdx.x];
    __syncthreads();
    out[blockIdx.x * 256 + threadIdx.x] = v + 1;
}

static unsigned long long fnv(const void *p, size_t n, unsigned long long h) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    const int stride = 3, mult = 40503, B = 256;
    int g = (n + B - 1) / B;
    std::vector<unsigned> h_in((size_t)n * 4), h_idx(n), h_out(n);  // word j = j
    for (size_t j = 0; j < h_in.size(); j++) h_in[j] = (unsigned)j;
    for (int i = 0; i < n; i++) h_idx[i] = (unsigned)(((unsigned long long)i * mult) % n);
    unsigned *in, *idx, *out, *c;
    uint4 *v_in, *v_out;
    CK(cudaMalloc(&in, h_in.size() * 4));
    CK(cudaMalloc(&idx, n * 4));
    CK(cudaMalloc(&out, n * 4));
    CK(cudaMalloc(&c, 16 * 4));
    CK(cudaMalloc(&v_in, (size_t)n * 16));
    CK(cudaMalloc(&v_out, (size_t)n * 16));
    CK(cudaMemcpy(in, h_in.data(), h_in.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(idx, h_idx.data(), n * 4, cudaMemcpyHostToDevice));
    // v_in as words: word j = j.
    CK(cudaMemcpy(v_in, h_in.data(), (size_t)n * 16, cudaMemcpyHostToDevice));
    CK(cudaMemset(c, 0, 64));
    unsigned long long h = 1469598103934665603ull;

    strided<<<g, B>>>(in, out, n, stride);
    CK(cudaMemcpy(h_out.data(), out, n * 4, cudaMemcpyDeviceToHost));
    h = fnv(h_out.data(), n * 4, h);
    printf("kernel=strided in=%p out=%p n=%d stride=%d\n", (void *)in, (void *)out, n, stride);

    gather<<<g, B>>>(in, idx, out, n);
    CK(cudaMemcpy(h_out.data(), out, n * 4, cudaMemcpyDeviceToHost));
    h = fnv(h_out.data(), n * 4, h);
    printf("kernel=gather in=%p idx=%p out=%p n=%d mult=%d\n", (void *)in, (void *)idx, (void *)out, n, mult);

    vec4<<<g, B>>>(v_in, v_out, n);
    std::vector<uint4> h_v(n);
    CK(cudaMemcpy(h_v.data(), v_out, (size_t)n * 16, cudaMemcpyDeviceToHost));
    h = fnv(h_v.data(), (size_t)n * 16, h);
    printf("kernel=vec4 in=%p out=%p n=%d\n", (void *)v_in, (void *)v_out, n);

    atomics<<<g, B>>>(c, out, n);
    unsigned hc[16];
    CK(cudaMemcpy(hc, c, 64, cudaMemcpyDeviceToHost));
    h = fnv(hc, 64, h);
    printf("kernel=atomics c=%p out=%p n=%d\n", (void *)c, (void *)out, n);

    generic<<<g, B>>>(1, out, n);
    CK(cudaMemcpy(h_out.data(), out, n * 4, cudaMemcpyDeviceToHost));
    h = fnv(h_out.data(), n * 4, h);
    printf("kernel=generic out=%p n=%d blocks=%d\n", (void *)out, n, g);
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    printf("memtest checksum=%016llx ok\n", h);
    return 0;
}
