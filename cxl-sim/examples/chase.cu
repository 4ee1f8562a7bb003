// chase: one GPU thread follows a chain of pointers through a buffer of 64-byte nodes: a
// random cycle (every load depends on the last and lands on a new line) or, with `seq`,
// node after node. Its time per step is the memory's load-to-use latency.
//   chase [mib=1024] [steps=200000] [random|seq] [launches=4]
// Each launch continues from where the last one ended, so no launch walks nodes another
// one left in the cache. With CHASE_SLOW_NS=N the kernel stamps %globaltimer every 64
// steps and the app prints `chase_slow first_unix_ns=T` for the first 64-step stretch
// slower than N ns per step (on the host's CLOCK_REALTIME, through an offset measured at
// start: `chase_clock offset_ns=O uncertainty_ns=U`): when a parameter change reached it. Output: `chase mode=M mib=N steps=S launches=L end=E
// ns_per_step=X` (the median of the launches after the first).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 2; } } while (0)

// Starts where the last launch ended (*out), so that every launch walks new nodes. With
// `stamps`, writes %globaltimer every 64 steps (CHASE_SLOW_NS, below).
__global__ void chase(const unsigned long long *next, long steps, unsigned long long *out,
                      unsigned long long *stamps) {
    unsigned long long p = *out;
    for (long i = 0; i < steps; i++) {
        if (stamps && (i & 63) == 0) {
            unsigned long long t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            stamps[i >> 6] = t + (p & 0);
        }
        p = next[p];
    }
    *out = p;
}

__global__ void read_timer(unsigned long long *t) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(*t));
}

static unsigned long long realtime_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoull(argv[1], 0, 10) : 1024;
    long steps = argc > 2 ? atol(argv[2]) : 200000;
    bool seq = argc > 3 && !strcmp(argv[3], "seq");
    int launches = argc > 4 ? atoi(argv[4]) : 4;
    size_t nodes = (mib << 20) / 64, words = nodes * 8;
    std::vector<unsigned long long> h(words, 0);
    // Sattolo: one cycle through every node.
    std::vector<size_t> perm(nodes);
    for (size_t i = 0; i < nodes; i++) perm[i] = i;
    if (!seq) {
        std::mt19937_64 rng(42);
        for (size_t i = nodes - 1; i > 0; i--) std::swap(perm[i], perm[rng() % i]);
        for (size_t i = 0; i < nodes; i++) h[i * 8] = perm[i] * 8;
    } else {
        for (size_t i = 0; i < nodes; i++) h[i * 8] = ((i + 1) % nodes) * 8;
    }
    unsigned long long *d, *out;
    CK(cudaMalloc(&d, words * 8));
    CK(cudaMalloc(&out, 8));
    CK(cudaMemset(out, 0, 8));
    CK(cudaMemcpy(d, h.data(), words * 8, cudaMemcpyHostToDevice));
    const char *slow = getenv("CHASE_SLOW_NS");
    unsigned long long *stamps = nullptr;
    long offset = 0;
    if (slow) {
        CK(cudaMalloc(&stamps, (size_t)(steps / 64 + 1) * 8 * launches));
        // %globaltimer against CLOCK_REALTIME: a one-thread kernel between two host reads
        // (the best of 20).
        unsigned long long *t, g, best = ~0ull;
        CK(cudaMalloc(&t, 8));
        for (int k = 0; k < 20; k++) {
            unsigned long long a = realtime_ns();
            read_timer<<<1, 1>>>(t);
            CK(cudaMemcpy(&g, t, 8, cudaMemcpyDeviceToHost));
            unsigned long long b = realtime_ns();
            if (b - a < best) { best = b - a; offset = (long)(g - (a + b) / 2); }
        }
        printf("chase_clock offset_ns=%ld uncertainty_ns=%llu\n", offset, best / 2);
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    std::vector<double> ns;
    unsigned long long end = 0;
    for (int l = 0; l < launches; l++) {
        CK(cudaEventRecord(e0));
        chase<<<1, 1>>>(d, steps, out, stamps ? stamps + (size_t)l * (steps / 64 + 1) : nullptr);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        if (l > 0 || launches == 1) ns.push_back(ms * 1e6 / steps);
    }
    CK(cudaMemcpy(&end, out, 8, cudaMemcpyDeviceToHost));
    // The host walks the same chain: the kernel's end node must match.
    unsigned long long p = 0;
    for (long i = 0; i < steps * launches; i++) p = h[p];
    if (p != end) { fprintf(stderr, "chase: end %llu, expected %llu\n", end, p); return 1; }
    if (stamps) {
        size_t per = steps / 64 + 1, n = per * launches;
        std::vector<unsigned long long> h(n);
        CK(cudaMemcpy(h.data(), stamps, n * 8, cudaMemcpyDeviceToHost));
        double limit = atof(slow);
        for (int l = 0; l < launches; l++)
            for (size_t k = 1; k < (size_t)(steps / 64); k++) {
                unsigned long long a = h[l * per + k - 1], b = h[l * per + k];
                if ((b - a) / 64.0 > limit) {
                    printf("chase_slow launch=%d step=%zu first_unix_ns=%llu\n", l, (k - 1) * 64,
                           (unsigned long long)((long)a - offset));
                    goto found;
                }
            }
        printf("chase_slow none\n");
    found:;
    }
    std::sort(ns.begin(), ns.end());
    printf("chase mode=%s mib=%zu steps=%ld launches=%d end=%llu ns_per_step=%.2f\n",
           seq ? "seq" : "random", mib, steps, launches, end, ns[ns.size() / 2]);
    return 0;
}
