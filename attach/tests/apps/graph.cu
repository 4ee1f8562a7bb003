// graph: captures two kernels (scale, then offset) into a CUDA graph and replays it `reps`
// times. Output: `graph n=N reps=R grid=G block=B launches=L threads=T checksum=C ok`
// (launches counts kernel executions: 2 per replay).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 2; } } while (0)

__global__ void scale(float *x, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= s; }
__global__ void offset(float *x, float o, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += o; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    int block = 128, grid = (n + block - 1) / block;
    std::vector<float> h(n, 1.0f);
    float *d; CK(cudaMalloc(&d, n * 4));
    CK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice));
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    scale<<<grid, block, 0, s>>>(d, 2.0f, n);
    offset<<<grid, block, 0, s>>>(d, 1.0f, n);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
    float want = 1.0f; for (int r = 0; r < reps; r++) want = want * 2.0f + 1.0f;
    double sum = 0;
    for (int i = 0; i < n; i++) { if (h[i] != want) { fprintf(stderr, "mismatch at %d: %f vs %f\n", i, h[i], want); return 1; } sum += h[i]; }
    printf("graph n=%d reps=%d grid=%d block=%d launches=%d threads=%lld checksum=%.6e ok\n",
           n, reps, grid, block, 2 * reps, (long long)grid * block * 2 * reps, sum);
    return 0;
}
