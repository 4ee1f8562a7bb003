// While another process's kernel faults (bench/gpu/fault_latency.cu), does this process's
// GPU work stall? Launches an empty kernel and synchronises in a loop for SECONDS seconds
// and prints the longest gap between two completions, with when it happened (ms from
// start). If a fault in one context stalls the others for as long as the driver takes to
// report it, no second worker can serve the queue sooner than that report.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void empty() {}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 3.0;
  cudaFree(0);
  auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  double worst = 0, worst_at = 0;
  long n = 0;
  for (;;) {
    empty<<<1, 32>>>();
    if (cudaDeviceSynchronize() != cudaSuccess) { printf("{\"error\":\"sync failed\"}\n"); return 1; }
    auto now = std::chrono::steady_clock::now();
    double gap = std::chrono::duration<double, std::milli>(now - last).count();
    if (gap > worst) { worst = gap; worst_at = std::chrono::duration<double, std::milli>(now - t0).count(); }
    last = now; n++;
    if (std::chrono::duration<double>(now - t0).count() > seconds) break;
  }
  printf("{\"launches\":%ld,\"longest_gap_ms\":%.3f,\"at_ms\":%.1f}\n", n, worst, worst_at);
  return 0;
}
