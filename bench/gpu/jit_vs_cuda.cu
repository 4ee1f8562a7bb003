// JIT-compiled eBPF versus hand-written CUDA, and PTX → cubin time through the driver.
//
// Usage: jit_vs_cuda DIR   reserves the maps' address range, writes DIR/base.txt, waits for
//                          DIR/ready, then reads what `gpu_diff bench DIR` wrote there
//                          (GPU_DIFF_BASE = that address): vecadd.ptx filter.ptx hist.ptx
//                          hashcount.ptx big.ptx hash.img params.txt
// Prints one JSON object on stdout (bench/gpu/run.sh stores it).
//
// Each job runs over N = 100,000,000 records, one thread per record, 256 threads a block,
// for both versions: the JIT's `.entry bpf_entry_<name>` (results pointer 0) and a CUDA
// kernel doing the same job on the same layout. Inputs are random (splitmix64 on the
// device). Outputs are poisoned before the checked run of each version and compared;
// every CUDA call is checked. Times: CUDA events around one launch, 3 warm-ups, then the
// median of 15.
//
//   vecadd     in {u32 a, u32 b} (8 B), out u32 = a + b
//   filter     in {u64 key, u64 flag} (16 B), out u32 = key > args[0] && (u8)flag != 0
//   hist       in u32 v, per-thread array (shm-maps layout, 16 buckets of u64 per thread):
//              value[thread][v & 15] += 1
//   hashcount  in u32 v, hash map (shm-maps layout, 4096 u32 keys present, u64 counts):
//              counts[v & 4095] += 1 (atomic)
#include <cuda.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_ = 0; cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); exit(2); } } while (0)
#define CKR(x) do { cudaError_t r_ = (x); if (r_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(r_)); exit(2); } } while (0)

static std::string slurp(const std::string &p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) { fprintf(stderr, "cannot read %s\n", p.c_str()); exit(2); }
    std::stringstream s; s << f.rdbuf(); return s.str();
}

__global__ void fill_random(uint64_t *p, size_t words, uint64_t seed) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < words; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        p[i] = z ^ (z >> 31);
    }
}

__global__ void vecadd_cuda(const uint2 *in, uint32_t *out, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint2 v = in[i];
    out[i] = v.x + v.y;
}

struct Rec16 { uint64_t key, flag; };
__global__ void filter_cuda(const Rec16 *in, uint32_t *out, size_t n, uint64_t thr) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    Rec16 r = in[i];
    out[i] = (r.key > thr && (uint8_t)r.flag != 0) ? 1u : 0u;
}

__global__ void hist_cuda(const uint32_t *in, uint64_t *vals, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    vals[i * 16 + (in[i] & 15)] += 1;
}

__host__ __device__ static inline uint64_t hash_u32(uint32_t k) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int b = 0; b < 4; b++) { h ^= (k >> (8 * b)) & 0xff; h *= 0x100000001b3ull; }
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; return h ^ (h >> 33);
}

// shm-maps hash layout for key_size 4, value_size 8: 32-byte slots {state, seq, key(8), value}.
__global__ void hash_cuda(const uint32_t *in, char *slots_base, uint64_t slots, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t k = in[i] & 4095;
    uint64_t h = hash_u32(k);
    for (uint64_t p = 0; p < slots; p++) {
        char *s = slots_base + ((h + p) & (slots - 1)) * 32;
        uint64_t st;
        asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(st) : "l"(s));
        if ((st & 3) == 0) return;
        if ((st & 3) == 2 && *(volatile uint32_t *)(s + 16) == k) {
            atomicAdd((unsigned long long *)(s + 24), 1ull);
            return;
        }
    }
}

__global__ void hist_check(const uint32_t *in, const uint64_t *vals, size_t n, unsigned long long *bad) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t b = in[i] & 15;
    for (uint32_t j = 0; j < 16; j++)
        if (vals[i * 16 + j] != (j == b ? 1ull : 0ull)) { atomicAdd(bad, 1ull); return; }
}

static CUmemAllocationProp dev_prop(CUdevice dev) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

// Backs [addr, addr + len) of an address range reserved earlier with device memory.
static void map_at(CUdevice dev, uint64_t addr, size_t len) {
    CUmemAllocationProp prop = dev_prop(dev);
    size_t gran = 0; CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = (len + gran - 1) / gran * gran;
    if (addr % gran) { fprintf(stderr, "%#llx is not %zu-aligned\n", (unsigned long long)addr, gran); exit(3); }
    CUmemGenericAllocationHandle h; CK(cuMemCreate(&h, size, &prop, 0));
    CK(cuMemMap((CUdeviceptr)addr, size, 0, h, 0));
    CUmemAccessDesc acc = {}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess((CUdeviceptr)addr, size, &acc, 1));
}

template <class F> static double time_median(F launch, int warm = 3, int reps = 15) {
    CUevent a, b; CK(cuEventCreate(&a, 0)); CK(cuEventCreate(&b, 0));
    for (int i = 0; i < warm; i++) launch();
    CK(cuCtxSynchronize());
    std::vector<double> t;
    for (int i = 0; i < reps; i++) {
        CK(cuEventRecord(a, 0)); launch(); CK(cuEventRecord(b, 0)); CK(cuEventSynchronize(b));
        float ms; CK(cuEventElapsedTime(&ms, a, b)); t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    CK(cuEventDestroy(a)); CK(cuEventDestroy(b));
    return t[t.size() / 2];
}

static double host_ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR\n", argv[0]); return 2; }
    std::string dir = argv[1];
    CK(cuInit(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    CKR(cudaSetDevice(0));
    // The maps' address range, wherever the driver puts it; published in DIR/base.txt for
    // `gpu_diff bench` (GPU_DIFF_BASE), which bakes it into the PTX, then DIR/ready.
    const size_t reserve = 32ull << 30;
    CUdeviceptr region = 0;
    CK(cuMemAddressReserve(&region, reserve, 2ull << 20, (CUdeviceptr)0x600000000000ull, 0));
    {
        FILE *f = fopen((dir + "/base.tmp").c_str(), "w");
        if (!f) { perror("base.tmp"); return 2; }
        fprintf(f, "%llu\n", (unsigned long long)region);
        fclose(f);
        rename((dir + "/base.tmp").c_str(), (dir + "/base.txt").c_str());
    }
    for (int i = 0; i < 3000; i++) {
        if (FILE *f = fopen((dir + "/ready").c_str(), "r")) { fclose(f); break; }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, 0);
    }
    unsigned long long N, hist_base, hist_len, hist_voff, hash_base, hash_len, hash_keys;
    {
        std::istringstream p(slurp(dir + "/params.txt"));
        p >> N >> hist_base >> hist_len >> hist_voff >> hash_base >> hash_len >> hash_keys;
        if (!p) { fprintf(stderr, "bad params.txt\n"); return 2; }
    }
    printf("{\n");

    // (b) PTX -> cubin through the driver.
    const char *names[] = {"big", "vecadd", "filter", "hist", "hashcount"};
    printf("  \"ptx_to_cubin\": [\n");
    for (int k = 0; k < 5; k++) {
        std::string ptx = slurp(dir + "/" + names[k] + ".ptx");
        std::vector<double> load, link;
        for (int r = 0; r < 11; r++) {
            auto t0 = std::chrono::steady_clock::now();
            CUmodule m; CK(cuModuleLoadData(&m, ptx.c_str()));
            double ms = host_ms_since(t0);
            CK(cuModuleUnload(m));
            if (r) load.push_back(ms);
            t0 = std::chrono::steady_clock::now();
            CUlinkState ls; CK(cuLinkCreate(0, 0, 0, &ls));
            CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)ptx.c_str(), ptx.size() + 1, names[k], 0, 0, 0));
            void *cubin; size_t cubin_size; CK(cuLinkComplete(ls, &cubin, &cubin_size));
            ms = host_ms_since(t0);
            CK(cuLinkDestroy(ls));
            if (r) link.push_back(ms);
        }
        std::sort(load.begin(), load.end()); std::sort(link.begin(), link.end());
        printf("    {\"ptx\": \"%s\", \"ptx_bytes\": %zu, \"cuModuleLoadData_median_ms\": %.3f, \"cuLink_median_ms\": %.3f, \"cuModuleLoadData_min_ms\": %.3f, \"cuLink_min_ms\": %.3f}%s\n",
               names[k], ptx.size(), load[load.size() / 2], link[link.size() / 2], load[0], link[0], k < 4 ? "," : "");
    }
    printf("  ],\n");

    // Buffers.
    if (hist_base != region || hash_base < hist_base + hist_len || hash_base + hash_len > region + reserve) {
        fprintf(stderr, "map addresses outside the reserved range\n"); return 3;
    }
    map_at(dev, hist_base, hist_len);
    map_at(dev, hash_base, hash_len);
    CUdeviceptr hist = hist_base, hash = hash_base;
    std::string hash_img = slurp(dir + "/hash.img");
    if (hash_img.size() != hash_len) { fprintf(stderr, "hash.img size\n"); return 2; }
    CUdeviceptr d_in, d_out; CK(cuMemAlloc(&d_in, N * 16)); CK(cuMemAlloc(&d_out, N * 4));
    unsigned long long *d_bad; CKR(cudaMalloc(&d_bad, 8));
    std::vector<uint32_t> h_a(N), h_b(N);
    const unsigned T = 256; const unsigned G = (unsigned)((N + T - 1) / T);
    const uint64_t slots = 2 * 4096; // next_pow2(2 * 4096)
    const uint64_t slots_off = (64 + 4 * 1024 + 63) / 64 * 64;

    printf("  \"runs\": [\n");
    const char *jobs[] = {"vecadd", "filter", "hist", "hashcount"};
    for (int j = 0; j < 4; j++) {
        std::string ptx = slurp(dir + "/" + jobs[j] + ".ptx");
        CUmodule m; CK(cuModuleLoadData(&m, ptx.c_str()));
        CUfunction f; CK(cuModuleGetFunction(&f, m, (std::string("bpf_entry_") + jobs[j]).c_str()));
        size_t in_size = j == 0 ? 8 : j == 1 ? 16 : 4, out_size = j < 2 ? 4 : 0;
        fill_random<<<4096, 256>>>((uint64_t *)d_in, N * in_size / 8, 1234 + j);
        CKR(cudaGetLastError()); CK(cuCtxSynchronize());
        uint64_t thr = 1ull << 63;
        unsigned long long in = d_in, isz = in_size, out = out_size ? (unsigned long long)d_out : 0, osz = out_size, n = N,
                           a0 = thr, a1 = 0, a2 = 0, a3 = 0, res = 0;
        void *params[] = {&in, &isz, &out, &osz, &n, &a0, &a1, &a2, &a3, &res};
        auto jit = [&] { CK(cuLaunchKernel(f, G, 1, 1, T, 1, 1, 0, 0, params, 0)); };
        auto cuda = [&] {
            if (j == 0) vecadd_cuda<<<G, T>>>((const uint2 *)d_in, (uint32_t *)d_out, N);
            else if (j == 1) filter_cuda<<<G, T>>>((const Rec16 *)d_in, (uint32_t *)d_out, N, thr);
            else if (j == 2) hist_cuda<<<G, T>>>((const uint32_t *)d_in, (uint64_t *)(hist + hist_voff), N);
            else hash_cuda<<<G, T>>>((const uint32_t *)d_in, (char *)(hash + slots_off), slots, N);
            CKR(cudaGetLastError());
        };
        // Checked runs.
        bool ok = true; std::string why;
        if (j < 2) {
            CK(cuMemsetD8(d_out, 0xab, N * 4)); jit(); CK(cuCtxSynchronize());
            CK(cuMemcpyDtoH(h_a.data(), d_out, N * 4));
            CK(cuMemsetD8(d_out, 0xab, N * 4)); cuda(); CK(cuCtxSynchronize());
            CK(cuMemcpyDtoH(h_b.data(), d_out, N * 4));
            if (memcmp(h_a.data(), h_b.data(), N * 4)) { ok = false; why = "outputs differ"; }
            size_t poison = 0, ones = 0;
            for (size_t i = 0; i < N; i++) { poison += h_a[i] == 0xababababu; ones += h_a[i] == 1; }
            if (j == 1 && poison) { ok = false; why += " unwritten verdicts"; }
            printf("    {\"job\": \"%s\", \"poison_values_left\": %zu, \"verdict_ones\": %zu, ", jobs[j], poison, j == 1 ? ones : 0);
        } else if (j == 2) {
            unsigned long long bad[2];
            for (int v = 0; v < 2; v++) {
                CK(cuMemsetD8(hist + hist_voff, 0, N * 16 * 8));
                if (v == 0) jit(); else cuda();
                CK(cuCtxSynchronize());
                CKR(cudaMemset(d_bad, 0, 8));
                hist_check<<<G, T>>>((const uint32_t *)d_in, (const uint64_t *)(hist + hist_voff), N, d_bad);
                CKR(cudaGetLastError());
                CKR(cudaMemcpy(&bad[v], d_bad, 8, cudaMemcpyDeviceToHost));
            }
            if (bad[0] || bad[1]) { ok = false; why = "histogram wrong"; }
            printf("    {\"job\": \"hist\", \"bad_threads_jit\": %llu, \"bad_threads_cuda\": %llu, ", bad[0], bad[1]);
        } else {
            std::string img[2];
            for (int v = 0; v < 2; v++) {
                CK(cuMemcpyHtoD(hash, hash_img.data(), hash_len));
                if (v == 0) jit(); else cuda();
                CK(cuCtxSynchronize());
                img[v].resize(hash_len);
                CK(cuMemcpyDtoH(&img[v][0], hash, hash_len));
            }
            if (img[0] != img[1]) { ok = false; why = "hash images differ"; }
            // Expected counts from the input.
            std::vector<uint32_t> in32(N); CK(cuMemcpyDtoH(in32.data(), d_in, N * 4));
            std::vector<uint64_t> cnt(4096, 0);
            for (size_t i = 0; i < N; i++) cnt[in32[i] & 4095]++;
            size_t wrong = 0;
            for (uint32_t k = 0; k < 4096; k++) {
                uint64_t h = hash_u32(k); bool found = false;
                for (uint64_t p = 0; p < slots && !found; p++) {
                    const char *s = img[0].data() + slots_off + ((h + p) & (slots - 1)) * 32;
                    uint64_t st; memcpy(&st, s, 8); uint32_t key; memcpy(&key, s + 16, 4);
                    if ((st & 3) == 0) break;
                    if ((st & 3) == 2 && key == k) { uint64_t v; memcpy(&v, s + 24, 8); found = true; if (v != cnt[k]) wrong++; }
                }
                if (!found) wrong++;
            }
            if (wrong) { ok = false; why += " counts wrong"; }
            printf("    {\"job\": \"hashcount\", \"wrong_keys\": %zu, ", wrong);
        }
        double tj = time_median(jit), tc = time_median(cuda);
        printf("\"records\": %llu, \"jit_ms\": %.4f, \"cuda_ms\": %.4f, \"ratio\": %.3f, \"outputs_equal\": %s%s%s}%s\n", N, tj, tc, tj / tc,
               ok ? "true" : "false", why.empty() ? "" : ", \"why\": \"", why.empty() ? "" : (why + "\"").c_str(), j < 3 ? "," : "");
        fflush(stdout);
        CK(cuModuleUnload(m));
    }
    printf("  ]\n}\n");
    return 0;
}
