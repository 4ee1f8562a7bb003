// vecadd3: vectorAdd(const float*, const float*, float*) with a fixed n, the signature the
// bpftime GPU examples probe (_Z9vectorAddPKfS0_Pf). Usage: vecadd3 [iters=3]
// Output: `vecadd3 n=N iters=I grid=G block=B launches=L threads=T ok`
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#define N (1 << 16)
__global__ void vectorAdd(const float *a, const float *b, float *c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) c[i] = a[i] + b[i];
}
int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 3, block = 256, grid = N / 256;
    std::vector<float> h(N, 1.0f);
    float *a, *b, *c;
    cudaMalloc(&a, N * 4); cudaMalloc(&b, N * 4); cudaMalloc(&c, N * 4);
    cudaMemcpy(a, h.data(), N * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, h.data(), N * 4, cudaMemcpyHostToDevice);
    for (int i = 0; i < iters; i++) vectorAdd<<<grid, block>>>(a, b, c);
    cudaMemcpy(h.data(), c, N * 4, cudaMemcpyDeviceToHost);
    for (int i = 0; i < N; i++) if (h[i] != 2.0f) { fprintf(stderr, "mismatch\n"); return 1; }
    printf("vecadd3 n=%d iters=%d grid=%d block=%d launches=%d threads=%d ok\n", N, iters, grid, block, iters, grid * block * iters);
    return 0;
}
