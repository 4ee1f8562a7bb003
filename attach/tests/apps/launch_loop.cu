// launch_loop: the host-probe overhead benchmark's app. Launches an empty kernel N times in
// a tight loop through the runtime (<<<>>>, which cudart turns into a driver launch), in
// batches of 1,000 with a synchronisation after each, and prints the wall time per launch
// (the median batch), so that a probe's cost per intercepted call shows as a difference.
//   launch_loop [n=200000]
// Output: `launch_loop n=N ns_per_launch=T ok`
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

__global__ void empty() {}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200000;
    const int batch = 1000;
    empty<<<1, 32>>>();
    if (cudaDeviceSynchronize() != cudaSuccess) return 2;
    std::vector<double> per;
    for (int done = 0; done < n; done += batch) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < batch; i++) empty<<<1, 32>>>();
        if (cudaDeviceSynchronize() != cudaSuccess) return 3;
        auto t1 = std::chrono::steady_clock::now();
        per.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / batch);
    }
    std::sort(per.begin(), per.end());
    printf("launch_loop n=%d ns_per_launch=%.1f ok\n", n, per[per.size() / 2]);
    return 0;
}
