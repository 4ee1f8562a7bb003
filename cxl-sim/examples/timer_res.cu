// timer_res: how finely %globaltimer and clock64 tick. One thread reads %globaltimer
// 100,000 times in a row and reports the smallest and median non-zero step, and how many
// reads saw the same value as the one before.
// Output: `globaltimer min_step_ns=A median_step_ns=B repeats=R of N`
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void reads(unsigned long long *t, int n) {
    for (int i = 0; i < n; i++) {
        unsigned long long v;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
        t[i] = v;
    }
}

int main() {
    const int n = 100000;
    unsigned long long *d;
    cudaMalloc(&d, n * 8);
    reads<<<1, 1>>>(d, n);
    std::vector<unsigned long long> h(n);
    cudaMemcpy(h.data(), d, n * 8, cudaMemcpyDeviceToHost);
    std::vector<unsigned long long> steps;
    int repeats = 0;
    for (int i = 1; i < n; i++) {
        if (h[i] == h[i - 1]) repeats++;
        else steps.push_back(h[i] - h[i - 1]);
    }
    std::sort(steps.begin(), steps.end());
    printf("globaltimer min_step_ns=%llu median_step_ns=%llu repeats=%d of %d\n",
           steps.empty() ? 0 : steps[0], steps.empty() ? 0 : steps[steps.size() / 2], repeats, n - 1);
    return 0;
}
