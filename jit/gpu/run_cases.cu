// GPU differential test, runner half (see jit/tests/gpu_gen.rs for the generator).
//
// How to run (from a checkout that has the jit crate, GPU machine with nvcc):
//   on the development machine:
//     BPFTIME_GPU_GEN_OUT=$PWD/gpu-cases BPFTIME_GPU_MAP_BASE=105553116266496 \
//       cargo test -p jit --test gpu_gen -- --nocapture        # 0x600000000000
//   on the GPU machine (copy gpu-cases/ and this file there):
//     nvcc -O2 -o run_cases jit/gpu/run_cases.cu -lcuda && ./run_cases gpu-cases 0x600000000000
//
// Usage: run_cases DIR BASE
//   DIR/cases.ptx, DIR/cases.txt from the generator; BASE the map-region address the PTX was
//   generated for. The region (512 MiB, zeroed) is mapped at exactly BASE with the CUDA
//   virtual memory API, each case's entry is launched as one block of n threads, and every
//   thread's r0 is compared with the interpreter's. Prints one line per mismatching case
//   and a summary; exit status 0 when everything matches.
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_ = 0; cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); exit(2); } } while (0)

struct Case { std::string entry; unsigned n; unsigned long long args[4]; std::vector<unsigned long long> expect; };

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s DIR BASE\n", argv[0]); return 2; }
    std::string dir = argv[1];
    unsigned long long base = strtoull(argv[2], 0, 0);
    CK(cuInit(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    char name[256]; CK(cuDeviceGetName(name, sizeof name, dev));
    printf("device: %s\n", name);

    // Map region at exactly `base`.
    size_t size = 512ull << 20;
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0; CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size = (size + gran - 1) / gran * gran;
    CUdeviceptr va = 0;
    CK(cuMemAddressReserve(&va, size, 0, (CUdeviceptr)base, 0));
    if (va != base) { fprintf(stderr, "could not reserve at %#llx (got %#llx)\n", base, (unsigned long long)va); return 3; }
    CUmemGenericAllocationHandle h; CK(cuMemCreate(&h, size, &prop, 0));
    CK(cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc acc = {}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(va, size, &acc, 1));
    CK(cuMemsetD8(va, 0, size));

    std::ifstream pf(dir + "/cases.ptx"); std::stringstream ps; ps << pf.rdbuf();
    std::string ptx = ps.str();
    char log[1 << 16] = {0};
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(size_t)sizeof log};
    CUmodule mod;
    CUresult lr = cuModuleLoadDataEx(&mod, ptx.c_str(), 2, opts, vals);
    if (lr != CUDA_SUCCESS) { fprintf(stderr, "module load failed (%d): %s\n", lr, log); return 2; }

    std::ifstream tf(dir + "/cases.txt");
    std::vector<Case> cases; std::string line;
    while (std::getline(tf, line)) {
        if (line.rfind("case ", 0) == 0) {
            Case c; std::istringstream is(line.substr(5));
            is >> c.entry >> c.n >> c.args[0] >> c.args[1] >> c.args[2] >> c.args[3];
            cases.push_back(c);
        } else if (!line.empty()) {
            cases.back().expect.push_back(strtoull(line.c_str(), 0, 10));
        }
    }
    CUdeviceptr res; CK(cuMemAlloc(&res, 8 * 1024));
    // With $OUT set, every thread's r0 is also written to $OUT/results.txt (same format as
    // cases.txt), for comparing elsewhere when the expectations are not shipped.
    FILE *outf = 0;
    if (const char *o = getenv("OUT")) { std::string p = std::string(o) + "/results.txt"; outf = fopen(p.c_str(), "w"); }
    int bad = 0, threads_bad = 0;
    for (auto &c : cases) {
        CUfunction f; CK(cuModuleGetFunction(&f, mod, c.entry.c_str()));
        CK(cuMemsetD8(res, 0xee, 8 * 1024));
        unsigned long long zero = 0, n = c.n, r = res;
        void *params[] = {&zero, &zero, &zero, &zero, &n, &c.args[0], &c.args[1], &c.args[2], &c.args[3], &r};
        CK(cuLaunchKernel(f, 1, 1, 1, c.n, 1, 1, 0, 0, params, 0));
        CUresult sr = cuCtxSynchronize();
        if (sr != CUDA_SUCCESS) { const char *s = 0; cuGetErrorString(sr, &s); printf("FAULT %s: %s\n", c.entry.c_str(), s); return 1; }
        std::vector<unsigned long long> got(c.n);
        CK(cuMemcpyDtoH(got.data(), res, 8 * c.n));
        if (outf) {
            fprintf(outf, "case %s %u %llu %llu %llu %llu\n", c.entry.c_str(), c.n, c.args[0], c.args[1], c.args[2], c.args[3]);
            for (unsigned i = 0; i < c.n; i++) fprintf(outf, "%llu\n", got[i]);
        }
        int wrong = 0;
        for (unsigned i = 0; i < c.n && i < c.expect.size(); i++) {
            if (got[i] != c.expect[i]) {
                if (wrong < 3) printf("MISMATCH %s thread %u: gpu %llu (%#llx) interp %llu (%#llx)\n", c.entry.c_str(), i, got[i], got[i], c.expect[i], c.expect[i]);
                wrong++;
            }
        }
        if (wrong) { bad++; threads_bad += wrong; }
    }
    if (outf) fclose(outf);
    printf("%zu cases, %d mismatching cases (%d threads)\n", cases.size(), bad, threads_bad);
    return bad ? 1 : 0;
}
