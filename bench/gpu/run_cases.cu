// GPU differential test, runner half (generator and checker: bench/src/bin/gpu_diff.rs;
// driver script: bench/gpu/jit_diff.sh).
//
// Usage: run_cases serve DIR
//   1. maps a 16 MiB device region (CUDA virtual memory API) and writes its address to
//      DIR/base.txt: `gpu_diff gen` bakes it into the PTX (GPU_DIFF_BASE);
//   2. waits for DIR/ready, then runs every chunk STEM listed in DIR/chunks.txt, in this one
//      process (the region's address is only valid here): reads STEM.cubin (ptxas output)
//      or STEM.ptx, STEM.run (one line per case), STEM.in (inputs, initial outputs, initial
//      map images); writes STEM.got: per case every thread's r0 (u64 LE), the output
//      records, then every map's final image, the layout of STEM.want.
//   3. then runs every case of the chunk a second time through the device interpreter
//      (device/src/cuda/kernel/bpf_interp.cuh, the persistent kernel's instant tier): the
//      relocated bytecode and map descriptors come from STEM.in at INTERP_OFF; same threads,
//      same initial bytes; writes STEM.igot in the layout of STEM.want. A thread whose run
//      fails writes r0 = 0xbad0_0000_0000_0000 | code << 40 | pc.
//   A fault (sticky error) writes STEM.fault with the case and the error, and exits 1.
//   Every CUDA call is checked.
//
// Line of STEM.run: case ENTRY MODE N IN_SIZE OUT_SIZE A0 A1 A2 A3 IN_OFF OUT_OFF NMAPS
//                   [ADDR LEN OFF]*NMAPS [INTERP_OFF N_INSNS STACK_SIZE]
//   INTERP_OFF: N_INSNS relocated 8-byte slots, then NMAPS 56-byte struct bpf_map_desc.
//   MODE par: one launch of one block of N threads (one per record);
//   MODE ser: N launches of one thread, record by record (extra param: the record index).
#include <cuda.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../device/src/cuda/kernel/bpf_interp.cuh"

static std::string g_stem;
static std::string g_case = "(setup)";

static void fail(const char *what, CUresult r, int line) {
    const char *s = 0;
    cuGetErrorString(r, &s);
    fprintf(stderr, "%s: case %s: %s failed (line %d): %s\n", g_stem.c_str(), g_case.c_str(), what, line, s ? s : "?");
    FILE *f = fopen((g_stem + ".fault").c_str(), "w");
    if (f) { fprintf(f, "case %s: %s: %s\n", g_case.c_str(), what, s ? s : "?"); fclose(f); }
    exit(1);
}
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) fail(#x, r_, __LINE__); } while (0)

struct MapImg { unsigned long long addr, len, off; };
struct Case {
    std::string entry, mode;
    unsigned n; unsigned long long in_size, out_size, args[4], in_off, out_off;
    std::vector<MapImg> maps;
    bool interp = false; unsigned long long interp_off = 0, n_insns = 0, stack_size = 0;
};

// The device interpreter pass: record i = idx (serial, one thread) or the global thread id
// (parallel, one block of n threads), with the JobCtx the JIT's entry builds.
extern "C" __global__ void bpf_interp_cases(const struct bpf_prog_desc *p, unsigned long long in, unsigned long long in_size,
                                            unsigned long long out, unsigned long long out_size, unsigned long long n,
                                            unsigned long long a0, unsigned long long a1, unsigned long long a2,
                                            unsigned long long a3, unsigned long long *results, long long idx) {
    unsigned long long gtid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long i = idx >= 0 ? (unsigned long long)idx : gtid;
    if (i >= n) return;
    unsigned long long ctx[10] = {in + i * in_size, in + (i + 1) * in_size, out + i * out_size, out + (i + 1) * out_size,
                                  i, n, a0, a1, a2, a3};
    struct bpf_env env;
    env.trace_buf = 0;
    env.max_insns = 10000000ull;
    env.thread = (bpf_u32)gtid;
    env.lock_pid = 1; // gpu_diff's JitOptions::lock_pid
    env.r2 = 0;
    bpf_u64 r0 = 0;
    bpf_u32 pc = 0;
    int rc = bpf_interp_run(p, (bpf_u64)ctx, &env, &r0, &pc);
    results[i] = rc == BPF_INTERP_OK ? r0 : (0xbad0000000000000ull | ((bpf_u64)rc << 40) | pc);
}

static void fail_rt(const char *what, cudaError_t e, int line);
#define CKRT(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) fail_rt(#x, e_, __LINE__); } while (0)

static int run_chunk_interp(const std::string &stem);

static std::string slurp(const std::string &p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) { fprintf(stderr, "cannot read %s\n", p.c_str()); exit(2); }
    std::stringstream s; s << f.rdbuf(); return s.str();
}

// Waits (up to `secs`) for `path` to exist.
static bool wait_for(const std::string &path, int secs) {
    for (int i = 0; i < secs * 50; i++) {
        if (FILE *f = fopen(path.c_str(), "r")) { fclose(f); return true; }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, 0);
    }
    return false;
}

static int run_chunk(const std::string &stem);
static std::vector<Case> read_cases(const std::string &stem);

int main(int argc, char **argv) {
    if (argc < 3 || std::string(argv[1]) != "serve") { fprintf(stderr, "usage: %s serve DIR\n", argv[0]); return 2; }
    std::string dir = argv[2];
    CK(cuInit(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    // The interpreter keeps 8 frames of 512 bytes in local memory.
    CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 16384));

    // The map region: 16 MiB wherever the driver puts it (a fixed hint is not reliably
    // free: seen taken in every process but one on an H100, driver 580); its address is
    // published for the generator, which bakes it into the PTX.
    size_t size = 16ull << 20;
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0; CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size = (size + gran - 1) / gran * gran;
    CUdeviceptr va = 0;
    CK(cuMemAddressReserve(&va, size, 0, (CUdeviceptr)0x600000000000ull, 0));
    CUmemGenericAllocationHandle h; CK(cuMemCreate(&h, size, &prop, 0));
    CK(cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc acc = {}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(va, size, &acc, 1));
    CK(cuMemsetD8(va, 0, size));
    {
        std::string tmp = dir + "/base.tmp";
        FILE *f = fopen(tmp.c_str(), "w");
        if (!f) { perror("base.tmp"); return 2; }
        fprintf(f, "%llu\n", (unsigned long long)va);
        fclose(f);
        rename(tmp.c_str(), (dir + "/base.txt").c_str());
    }
    printf("map region at %#llx (%zu bytes)\n", (unsigned long long)va, size);
    fflush(stdout);
    if (!wait_for(dir + "/ready", 600)) { fprintf(stderr, "no %s/ready\n", dir.c_str()); return 2; }
    std::istringstream ls(slurp(dir + "/chunks.txt"));
    std::string stem;
    int bad = 0;
    while (std::getline(ls, stem)) {
        if (stem.empty()) continue;
        bad |= run_chunk(stem);
        bad |= run_chunk_interp(stem);
    }
    return bad;
}

// Runs every case of STEM (module from STEM.cubin when present, else STEM.ptx).
static int run_chunk(const std::string &stem) {
    g_stem = stem;
    g_case = "(setup)";
    std::string ptx;
    if (FILE *cf = fopen((g_stem + ".cubin").c_str(), "rb")) { fclose(cf); ptx = slurp(g_stem + ".cubin"); }
    else ptx = slurp(g_stem + ".ptx");
    std::string blob = slurp(g_stem + ".in");
    static char log[1 << 16];
    log[0] = 0;
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(size_t)sizeof log};
    CUmodule mod;
    auto t0 = std::chrono::steady_clock::now();
    CUresult lr = cuModuleLoadDataEx(&mod, ptx.c_str(), 2, opts, vals);
    double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (lr != CUDA_SUCCESS) {
        // Not sticky: record it (every case of the chunk then counts as failed) and go on.
        fprintf(stderr, "%s: module load failed (%d): %s\n", g_stem.c_str(), lr, log);
        FILE *f = fopen((g_stem + ".fault").c_str(), "w");
        if (f) { fprintf(f, "module load failed (%d): %s\n", lr, log); fclose(f); }
        return 1;
    }

    std::vector<Case> cases;
    {
        std::istringstream rs(slurp(g_stem + ".run"));
        std::string line;
        while (std::getline(rs, line)) {
            if (line.rfind("case ", 0) != 0) continue;
            std::istringstream is(line.substr(5));
            Case c; unsigned nm = 0;
            is >> c.entry >> c.mode >> c.n >> c.in_size >> c.out_size >> c.args[0] >> c.args[1] >> c.args[2] >> c.args[3] >> c.in_off >> c.out_off >> nm;
            for (unsigned i = 0; i < nm; i++) { MapImg m; is >> m.addr >> m.len >> m.off; c.maps.push_back(m); }
            if (!is) { fprintf(stderr, "bad line: %s\n", line.c_str()); return 2; }
            if (is >> c.interp_off >> c.n_insns >> c.stack_size) c.interp = true;
            cases.push_back(c);
        }
    }
    size_t max_in = 64, max_out = 64, max_n = 1;
    for (auto &c : cases) {
        max_in = std::max(max_in, (size_t)(c.in_size * c.n));
        max_out = std::max(max_out, (size_t)(c.out_size * c.n));
        max_n = std::max(max_n, (size_t)c.n);
    }
    CUdeviceptr d_in, d_out, d_res;
    CK(cuMemAlloc(&d_in, max_in)); CK(cuMemAlloc(&d_out, max_out)); CK(cuMemAlloc(&d_res, 8 * max_n));
    FILE *got = fopen((g_stem + ".got").c_str(), "wb");
    if (!got) { perror("open .got"); return 2; }
    std::vector<unsigned char> buf;
    auto t1 = std::chrono::steady_clock::now();
    for (auto &c : cases) {
        g_case = c.entry;
        CUfunction f; CK(cuModuleGetFunction(&f, mod, c.entry.c_str()));
        for (auto &m : c.maps) CK(cuMemcpyHtoD(m.addr, blob.data() + m.off, m.len));
        if (c.in_size) CK(cuMemcpyHtoD(d_in, blob.data() + c.in_off, c.in_size * c.n));
        if (c.out_size) CK(cuMemcpyHtoD(d_out, blob.data() + c.out_off, c.out_size * c.n));
        CK(cuMemsetD8(d_res, 0xee, 8 * c.n));
        unsigned long long in = c.in_size ? (unsigned long long)d_in : 0, out = c.out_size ? (unsigned long long)d_out : 0;
        unsigned long long n = c.n, r = d_res;
        if (c.mode == "par") {
            void *params[] = {&in, &c.in_size, &out, &c.out_size, &n, &c.args[0], &c.args[1], &c.args[2], &c.args[3], &r};
            CK(cuLaunchKernel(f, 1, 1, 1, c.n, 1, 1, 0, 0, params, 0));
            CK(cuCtxSynchronize());
        } else {
            for (unsigned long long i = 0; i < c.n; i++) {
                void *params[] = {&in, &c.in_size, &out, &c.out_size, &n, &c.args[0], &c.args[1], &c.args[2], &c.args[3], &r, &i};
                CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, params, 0));
                CK(cuCtxSynchronize());
            }
        }
        buf.resize(8 * c.n);
        CK(cuMemcpyDtoH(buf.data(), d_res, 8 * c.n));
        fwrite(buf.data(), 1, buf.size(), got);
        if (c.out_size) {
            buf.resize(c.out_size * c.n);
            CK(cuMemcpyDtoH(buf.data(), d_out, buf.size()));
            fwrite(buf.data(), 1, buf.size(), got);
        }
        for (auto &m : c.maps) {
            buf.resize(m.len);
            CK(cuMemcpyDtoH(buf.data(), m.addr, m.len));
            fwrite(buf.data(), 1, buf.size(), got);
        }
    }
    fclose(got);
    double run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    printf("%s: %zu cases, module load %.0f ms (%zu bytes), runs %.0f ms\n", g_stem.c_str(), cases.size(), load_ms, ptx.size(), run_ms);
    fflush(stdout);
    CK(cuMemFree(d_in)); CK(cuMemFree(d_out)); CK(cuMemFree(d_res));
    CK(cuModuleUnload(mod));
    return 0;
}

static void fail_rt(const char *what, cudaError_t e, int line) {
    const char *s = cudaGetErrorString(e);
    fprintf(stderr, "%s: case %s: %s failed (line %d): %s\n", g_stem.c_str(), g_case.c_str(), what, line, s ? s : "?");
    FILE *f = fopen((g_stem + ".fault").c_str(), "w");
    if (f) { fprintf(f, "case %s: %s: %s\n", g_case.c_str(), what, s ? s : "?"); fclose(f); }
    exit(1);
}

// Cases of STEM.run (the interpreter pass's own copy of the parser).
static std::vector<Case> read_cases(const std::string &stem) {
    std::vector<Case> cases;
    std::istringstream rs(slurp(stem + ".run"));
    std::string line;
    while (std::getline(rs, line)) {
        if (line.rfind("case ", 0) != 0) continue;
        std::istringstream is(line.substr(5));
        Case c; unsigned nm = 0;
        is >> c.entry >> c.mode >> c.n >> c.in_size >> c.out_size >> c.args[0] >> c.args[1] >> c.args[2] >> c.args[3] >> c.in_off >> c.out_off >> nm;
        for (unsigned i = 0; i < nm; i++) { MapImg m; is >> m.addr >> m.len >> m.off; c.maps.push_back(m); }
        if (!is) { fprintf(stderr, "bad line: %s\n", line.c_str()); exit(2); }
        if (is >> c.interp_off >> c.n_insns >> c.stack_size) c.interp = true;
        cases.push_back(c);
    }
    return cases;
}

// Runs every case of STEM through the device interpreter; writes STEM.igot.
static int run_chunk_interp(const std::string &stem) {
    g_stem = stem;
    g_case = "(interp setup)";
    std::vector<Case> cases = read_cases(stem);
    for (auto &c : cases)
        if (!c.interp) { printf("%s: no interpreter fields, interpreter pass skipped\n", stem.c_str()); return 0; }
    std::string blob = slurp(stem + ".in");
    size_t max_in = 64, max_out = 64, max_n = 1, max_code = 64;
    for (auto &c : cases) {
        max_in = std::max(max_in, (size_t)(c.in_size * c.n));
        max_out = std::max(max_out, (size_t)(c.out_size * c.n));
        max_n = std::max(max_n, (size_t)c.n);
        max_code = std::max(max_code, (size_t)(8 * c.n_insns + sizeof(struct bpf_map_desc) * c.maps.size()));
    }
    CUdeviceptr d_in, d_out, d_res, d_code, d_prog;
    CK(cuMemAlloc(&d_in, max_in)); CK(cuMemAlloc(&d_out, max_out)); CK(cuMemAlloc(&d_res, 8 * max_n));
    CK(cuMemAlloc(&d_code, max_code)); CK(cuMemAlloc(&d_prog, sizeof(struct bpf_prog_desc)));
    FILE *got = fopen((stem + ".igot").c_str(), "wb");
    if (!got) { perror("open .igot"); return 2; }
    std::vector<unsigned char> buf;
    auto t1 = std::chrono::steady_clock::now();
    for (auto &c : cases) {
        g_case = "interp " + c.entry;
        for (auto &m : c.maps) CK(cuMemcpyHtoD(m.addr, blob.data() + m.off, m.len));
        if (c.in_size) CK(cuMemcpyHtoD(d_in, blob.data() + c.in_off, c.in_size * c.n));
        if (c.out_size) CK(cuMemcpyHtoD(d_out, blob.data() + c.out_off, c.out_size * c.n));
        CK(cuMemsetD8(d_res, 0xee, 8 * c.n));
        size_t code_len = 8 * c.n_insns + sizeof(struct bpf_map_desc) * c.maps.size();
        if (c.interp_off + code_len > blob.size()) { fprintf(stderr, "%s: bad INTERP_OFF\n", c.entry.c_str()); return 2; }
        CK(cuMemcpyHtoD(d_code, blob.data() + c.interp_off, code_len));
        struct bpf_prog_desc pd;
        pd.insns = (bpf_u64)d_code;
        pd.maps = (bpf_u64)d_code + 8 * c.n_insns;
        pd.n_insns = (bpf_u32)c.n_insns;
        pd.n_maps = (bpf_u32)c.maps.size();
        pd.stack_size = (bpf_u32)c.stack_size;
        pd.reserved = 0;
        CK(cuMemcpyHtoD(d_prog, &pd, sizeof pd));
        unsigned long long in = c.in_size ? (unsigned long long)d_in : 0, out = c.out_size ? (unsigned long long)d_out : 0;
        const struct bpf_prog_desc *pp = (const struct bpf_prog_desc *)(uintptr_t)d_prog;
        unsigned long long *res = (unsigned long long *)(uintptr_t)d_res;
        if (c.mode == "par") {
            bpf_interp_cases<<<1, c.n>>>(pp, in, c.in_size, out, c.out_size, c.n, c.args[0], c.args[1], c.args[2], c.args[3], res, -1);
            CKRT(cudaGetLastError());
            CK(cuCtxSynchronize());
        } else {
            for (unsigned long long i = 0; i < c.n; i++) {
                bpf_interp_cases<<<1, 1>>>(pp, in, c.in_size, out, c.out_size, c.n, c.args[0], c.args[1], c.args[2], c.args[3], res, (long long)i);
                CKRT(cudaGetLastError());
                CK(cuCtxSynchronize());
            }
        }
        buf.resize(8 * c.n);
        CK(cuMemcpyDtoH(buf.data(), d_res, 8 * c.n));
        fwrite(buf.data(), 1, buf.size(), got);
        if (c.out_size) {
            buf.resize(c.out_size * c.n);
            CK(cuMemcpyDtoH(buf.data(), d_out, buf.size()));
            fwrite(buf.data(), 1, buf.size(), got);
        }
        for (auto &m : c.maps) {
            buf.resize(m.len);
            CK(cuMemcpyDtoH(buf.data(), m.addr, m.len));
            fwrite(buf.data(), 1, buf.size(), got);
        }
    }
    fclose(got);
    double run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    printf("%s: %zu cases through the interpreter, runs %.0f ms\n", stem.c_str(), cases.size(), run_ms);
    fflush(stdout);
    CK(cuMemFree(d_in)); CK(cuMemFree(d_out)); CK(cuMemFree(d_res)); CK(cuMemFree(d_code)); CK(cuMemFree(d_prog));
    return 0;
}
