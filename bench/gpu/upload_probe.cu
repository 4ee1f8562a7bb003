// What a generation swap's code upload costs, and whether it must wait for the persistent
// kernel (row f of gpu_service). Built and run by bench/gpu/upload_probe.sh on the GPU
// machine:
//   1. cuLibraryLoadData, cuKernelGetFunction (the upload) and cuLibraryUnload of cubins of
//      growing size, with no kernel running (p50 of 10);
//   2. unloading 16 libraries in a row (the service's batch of stale generations);
//   3. the upload in a second context of the same process, and 4. in another process, while
//      a persistent kernel runs in the first context: does it return before that kernel
//      stops, and does the kernel see a gap (its own longest pause between two loop turns,
//      timed with %globaltimer)?
//   5. (PROBE_GREEN=1: only this) two green contexts over every SM, which share the primary
//      context's memory: does the upload in one wait for a persistent kernel in the other
//      (on driver 580 it does: bench/results/upload_probe/README.md), and what does the
//      handoff cost (stop the kernel in one, launch a kernel in the other that writes
//      memory allocated in the primary context), against the same handoff in one context?
// PROBE_KERNEL names the kernel to fetch (default `gen`); PROBE_ONLY_SIZES=1 stops after 1;
// PROBE_LMEM_MAX=1 keeps the context's local memory at its largest (CU_CTX_LMEM_RESIZE_TO_MAX);
// PROBE_STACK=N reserves N bytes of stack a thread first (CU_LIMIT_STACK_SIZE).
#include <cuda.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#define CU(x)                                                                     \
    do {                                                                          \
        CUresult e_ = (x);                                                        \
        if (e_ != CUDA_SUCCESS) {                                                 \
            const char *s_;                                                       \
            cuGetErrorString(e_, &s_);                                            \
            printf("CU %s at line %d: %s\n", #x, __LINE__, s_);                   \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

struct Ctl {
    volatile unsigned int stop, running, marked;
    volatile unsigned long long turns, max_gap_ns;
};

extern "C" __global__ void spin(Ctl *c) {
    if (threadIdx.x != 0) return;
    unsigned long long last, now, gap = 0, turns = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(last));
    if (blockIdx.x == 0) c->running = 1;
    while (!c->stop) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - last > gap) gap = now - last;
        last = now;
        turns++;
    }
    if (blockIdx.x == 0) {
        c->turns = turns;
        c->max_gap_ns = gap;
    }
}

// The handoff's new kernel: writes memory allocated elsewhere, then tells the host.
extern "C" __global__ void mark(Ctl *c, unsigned int *dev_word, unsigned int v) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    *dev_word = v;
    __threadfence_system();
    c->marked = v;
}

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
static std::string slurp(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) {
        printf("cannot read %s\n", p);
        exit(1);
    }
    std::string s;
    char b[65536];
    size_t n;
    while ((n = fread(b, 1, sizeof b, f)) > 0) s.append(b, n);
    fclose(f);
    return s;
}
static double p50(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Loads `img` and fetches its kernel `gen`: returns the fetch time in ms.
static double load_fetch(const std::string &img, CUlibrary *lib, CUfunction *f, double *load_ms) {
    CUkernel k;
    double a = now_ms();
    CU(cuLibraryLoadData(lib, img.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    const char *name = getenv("PROBE_KERNEL");
    CU(cuLibraryGetKernel(&k, *lib, name ? name : "gen"));
    double b = now_ms();
    CU(cuKernelGetFunction(f, k));
    if (load_ms) *load_ms = b - a;
    return now_ms() - b;
}

// In the current context: loads `img`, fetches its kernel and runs it once on a stream of
// its own; says how long each step took.
static std::string upload_and_run(const std::string &img) {
    CUlibrary lib;
    CUfunction f;
    double load_ms;
    const double fetch = load_fetch(img, &lib, &f, &load_ms);
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const double b = now_ms();
    CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr));
    CU(cuStreamSynchronize(s));
    char msg[160];
    snprintf(msg, sizeof msg, "load %.3f ms, fetch %.3f ms, launch+sync %.3f ms", load_ms, fetch, now_ms() - b);
    return msg;
}

// A non-blocking stream of the current context, or of green context `g`.
static CUstream make_stream(CUgreenCtx g) {
    CUstream s;
    if (g)
        CU(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0));
    else
        CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

// With a persistent kernel running in `ctx` (on all SMs, one thread a block; on green
// context `g`'s stream when given), runs `other` (which uploads and launches in another
// context), then stops the kernel after 300 ms if `other` has not returned. Prints what
// happened.
template <class F>
static void beside_persistent(CUcontext ctx, const char *what, F other, CUgreenCtx g = nullptr) {
    CU(cuCtxSetCurrent(ctx));
    CUdevice dev;
    CU(cuCtxGetDevice(&dev));
    int sms;
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    Ctl *c;
    CU(cuMemHostAlloc((void **)&c, sizeof(Ctl), CU_MEMHOSTALLOC_DEVICEMAP));
    *c = Ctl{};
    CUdeviceptr dc;
    CU(cuMemHostGetDevicePointer(&dc, c, 0));
    CUmodule m;
    CU(cuModuleLoadData(&m, slurp("spin.cubin").data()));
    CUfunction fspin;
    CU(cuModuleGetFunction(&fspin, m, "spin"));
    CUstream s = make_stream(g);
    void *args[] = {&dc};
    CU(cuLaunchKernel(fspin, sms * 4, 1, 1, 32, 1, 1, 0, s, args, nullptr));
    while (!c->running) {
    }
    double t0 = now_ms(), t_ret = -1;
    std::thread th([&] {
        other();
        t_ret = now_ms();
    });
    while (t_ret < 0 && now_ms() - t0 < 300) usleep(100);
    const bool before = t_ret >= 0;
    double t_stop = now_ms();
    c->stop = 1;
    CU(cuStreamSynchronize(s));
    th.join();
    printf("%s: returned %s the persistent kernel stopped (%.3f ms after the start%s); the "
           "kernel's longest pause between two turns: %.3f ms (%llu turns)\n",
           what, before ? "BEFORE" : "only AFTER", t_ret - t0,
           before ? "" : ", stop sent at 300 ms", c->max_gap_ns / 1e6, c->turns);
    (void)t_stop;
    CU(cuModuleUnload(m));
    CU(cuStreamDestroy(s));
    CU(cuMemFreeHost(c));
}

// A green context over every SM of `dev`.
static CUcontext green(CUdevice dev, CUgreenCtx *out) {
    CUdevResource sm;
    CU(cuDeviceGetDevResource(dev, &sm, CU_DEV_RESOURCE_TYPE_SM));
    CUdevResourceDesc desc;
    CU(cuDevResourceGenerateDesc(&desc, &sm, 1));
    CU(cuGreenCtxCreate(out, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUcontext c;
    CU(cuCtxFromGreenCtx(&c, *out));
    printf("green context over %u SMs\n", sm.sm.smCount);
    return c;
}

// Section 5. `primary` is current.
static void green_contexts(CUdevice dev, CUcontext primary, const std::string &img) {
    CUgreenCtx g1, g2;
    CUcontext c1 = green(dev, &g1), c2 = green(dev, &g2);
    // Load + fetch `img` in `c`, beside a persistent kernel; says what each took.
    auto fetch_in = [&](CUcontext c, const char *name) {
        return [&img, c, name] {
            CU(cuCtxSetCurrent(c));
            CUlibrary lib;
            CUfunction f;
            double l;
            const double fetch = load_fetch(img, &lib, &f, &l);
            printf("  (%s: load %.3f ms, fetch %.3f ms)\n", name, l, fetch);
        };
    };
    // a. kernel in g1, upload (load + fetch) in g2; b. kernel in the primary context,
    // upload in g2; c. both in g1 (expected to wait, like the primary context's own).
    beside_persistent(c1, "green: kernel in green 1, load + fetch in green 2", fetch_in(c2, "green 2"), g1);
    beside_persistent(primary, "green: kernel in the primary context, load + fetch in green 2",
                      fetch_in(c2, "green 2"));
    beside_persistent(c1, "green: kernel in green 1, load + fetch in green 1", fetch_in(c1, "green 1"), g1);
    // d. The handoff, 30 times each: spin in `from`, then stop it, wait for it, launch
    // `mark` in `to`, and wait until the host sees its write. `mark` writes a word of
    // memory allocated in the primary context; checked after.
    CU(cuCtxSetCurrent(primary));
    CUdeviceptr word;
    CU(cuMemAlloc(&word, 4));
    CU(cuMemsetD32(word, 0, 1));
    const std::string spin_img = slurp("spin.cubin");
    struct Side {
        CUcontext ctx;
        CUgreenCtx g;
        CUmodule m;
        CUfunction spin, mark;
        CUstream s;
    };
    auto side = [&](CUcontext ctx, CUgreenCtx g) {
        Side x{ctx, g, nullptr, nullptr, nullptr, nullptr};
        CU(cuCtxSetCurrent(ctx));
        CU(cuModuleLoadData(&x.m, spin_img.data()));
        CU(cuModuleGetFunction(&x.spin, x.m, "spin"));
        CU(cuModuleGetFunction(&x.mark, x.m, "mark"));
        x.s = make_stream(g);
        return x;
    };
    Side s1 = side(c1, g1), s2 = side(c2, g2);
    int sms;
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    Ctl *c;
    CU(cuMemHostAlloc((void **)&c, sizeof(Ctl), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CUdeviceptr dc;
    CU(cuMemHostGetDevicePointer(&dc, c, 0));
    unsigned int v = 0;
    for (int cross = 0; cross < 2; cross++) {
        std::vector<double> pause;
        bool words_ok = true;
        for (int r = 0; r < 30; r++) {
            Side &from = s1, &to = cross ? s2 : s1;
            *c = Ctl{};
            CU(cuCtxSetCurrent(from.ctx));
            void *sa[] = {&dc};
            CU(cuLaunchKernel(from.spin, sms * 4, 1, 1, 32, 1, 1, 0, from.s, sa, nullptr));
            while (!c->running) {
            }
            usleep(2000);
            v++;
            const double t0 = now_ms();
            c->stop = 1;
            CU(cuStreamSynchronize(from.s));
            CU(cuCtxSetCurrent(to.ctx));
            void *ma[] = {&dc, &word, &v};
            CU(cuLaunchKernel(to.mark, 1, 1, 1, 32, 1, 1, 0, to.s, ma, nullptr));
            const double t_launch = now_ms();
            while (c->marked != v) {
                if (now_ms() - t_launch > 1000) {
                    printf("handoff: the new kernel did not run within 1 s\n");
                    exit(1);
                }
            }
            pause.push_back(now_ms() - t0);
            CU(cuStreamSynchronize(to.s));
            CU(cuCtxSetCurrent(primary));
            unsigned int got = 0;
            CU(cuMemcpyDtoH(&got, word, 4));
            if (got != v) words_ok = false;
        }
        std::vector<double> sorted = pause;
        std::sort(sorted.begin(), sorted.end());
        printf("handoff %s: stop -> old kernel done -> new kernel running, p50 %.3f ms, max %.3f ms (30); "
               "the new kernel's write to primary-context memory %s\n",
               cross ? "green 1 -> green 2" : "green 1 -> green 1 (same context)", sorted[15], sorted.back(),
               words_ok ? "seen every time" : "NOT SEEN");
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IONBF, 0);
    const int nsizes = argc - 1;
    // 4: another process, forked before this one touches CUDA.
    int pipefd[2];
    if (pipe(pipefd) != 0) return 1;
    int go[2];
    if (pipe(go) != 0) return 1;
    pid_t child = fork();
    if (child == 0) {
        char g;
        if (read(go[0], &g, 1) != 1) _exit(1);
        CU(cuInit(0));
        CUdevice dev;
        CU(cuDeviceGet(&dev, 0));
        CUcontext ctx;
        CU(cuDevicePrimaryCtxRetain(&ctx, dev));
        CU(cuCtxSetCurrent(ctx));
        const std::string msg = upload_and_run(slurp(argv[nsizes]));
        if (write(pipefd[1], msg.data(), msg.size()) != (ssize_t)msg.size()) _exit(1);
        _exit(0);
    }
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    char name[128];
    CU(cuDeviceGetName(name, sizeof name, dev));
    int drv;
    CU(cuDriverGetVersion(&drv));
    printf("device %s, driver API %d\n", name, drv);
    if (getenv("PROBE_LMEM_MAX")) CU(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_LMEM_RESIZE_TO_MAX));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    if (const char *st = getenv("PROBE_STACK")) {
        // Reserve local memory for this many bytes of stack a thread before any fetch.
        CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, (size_t)atoll(st)));
        size_t v = 0;
        CU(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
        printf("stack limit %zu bytes a thread\n", v);
    }

    if (getenv("PROBE_GREEN")) {
        green_contexts(dev, ctx, slurp(argv[nsizes]));
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
        printf("done\n");
        return 0;
    }
    // 1. Upload cost by size.
    for (int i = 1; i <= nsizes; i++) {
        std::string img = slurp(argv[i]);
        std::vector<double> load, fetch, unload;
        for (int r = 0; r < 10; r++) {
            CUlibrary lib;
            CUfunction f;
            double l;
            fetch.push_back(load_fetch(img, &lib, &f, &l));
            load.push_back(l);
            double a = now_ms();
            CU(cuLibraryUnload(lib));
            unload.push_back(now_ms() - a);
        }
        printf("cubin %s (%zu bytes): load %.3f ms, fetch (upload) %.3f ms, unload %.3f ms (p50 of 10)\n",
               argv[i], img.size(), p50(load), p50(fetch), p50(unload));
    }
    if (getenv("PROBE_ONLY_SIZES")) {
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
        return 0;
    }
    // 2. Unloading 16 fetched libraries in a row (the largest cubin).
    {
        std::string img = slurp(argv[nsizes]);
        std::vector<CUlibrary> libs(16);
        for (auto &l : libs) {
            CUfunction f;
            load_fetch(img, &l, &f, nullptr);
        }
        double a = now_ms();
        for (auto &l : libs) CU(cuLibraryUnload(l));
        printf("unloading 16 libraries of %s: %.3f ms\n", argv[nsizes], now_ms() - a);
    }
    // 3. A second context of this process.
    {
        std::string img = slurp(argv[nsizes]);
        CUcontext other;
        CUctxCreateParams params = {};
        CU(cuCtxCreate(&other, &params, 0, dev));
        CU(cuCtxSetCurrent(ctx));
        beside_persistent(ctx, "second context, same process: load + fetch + launch + sync", [&] {
            CU(cuCtxSetCurrent(other));
            printf("  (second context: %s)\n", upload_and_run(img).c_str());
        });
        // The same context, for comparison (GPU-FACTS: blocks).
        beside_persistent(ctx, "same context: load + fetch", [&] {
            CU(cuCtxSetCurrent(ctx));
            CUlibrary lib;
            CUfunction f;
            double l;
            double fetch = load_fetch(img, &lib, &f, &l);
            printf("  (same context: load %.3f ms, fetch %.3f ms)\n", l, fetch);
        });
    }
    // 4. Another process.
    beside_persistent(ctx, "another process: load + fetch + launch + sync", [&] {
        if (write(go[1], "g", 1) != 1) return;
        char msg[256] = {0};
        ssize_t n = read(pipefd[0], msg, sizeof msg - 1);
        if (n > 0) printf("  (other process: %s)\n", msg);
    });
    int st;
    waitpid(child, &st, 0);
    printf("done\n");
    return 0;
}
