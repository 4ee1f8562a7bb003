// coop: a cooperative kernel (grid-wide sync) launched with cudaLaunchCooperativeKernel:
// phase 1 writes x[i] = i, grid.sync(), phase 2 reads the mirrored element.
// Output: `coop n=N grid=G block=B launches=1 threads=T checksum=C ok`
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 2; } } while (0)

__global__ void mirror(int *x, int *y, int n) {
    cg::grid_group grid = cg::this_grid();
    for (int i = grid.thread_rank(); i < n; i += grid.size()) x[i] = i;
    grid.sync();
    for (int i = grid.thread_rank(); i < n; i += grid.size()) y[i] = x[n - 1 - i];
}

int main() {
    int dev = 0, sms = 0, per = 0, block = 256, n = 1 << 20;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, mirror, block, 0));
    int grid = sms * (per < 2 ? per : 2);
    int *x, *y; CK(cudaMalloc(&x, n * 4)); CK(cudaMalloc(&y, n * 4));
    void *args[] = {&x, &y, &n};
    CK(cudaLaunchCooperativeKernel((void *)mirror, grid, block, args, 0, 0));
    CK(cudaDeviceSynchronize());
    std::vector<int> h(n); CK(cudaMemcpy(h.data(), y, n * 4, cudaMemcpyDeviceToHost));
    long long sum = 0;
    for (int i = 0; i < n; i++) { if (h[i] != n - 1 - i) { fprintf(stderr, "mismatch at %d\n", i); return 1; } sum += h[i]; }
    printf("coop n=%d grid=%d block=%d launches=1 threads=%lld checksum=%lld ok\n", n, grid, block, (long long)grid * block, sum);
    return 0;
}
