// driver_api: loads one PTX file through every driver entry point that takes an image and
// launches its `vectorAdd(const float*, const float*, float*, int)` through each launch call.
//   driver_api PTXFILE [FATBIN]
// Paths: cuModuleLoadData, cuModuleLoadDataEx, cuModuleLoad (file), cuLinkCreate/AddData/
// Complete + cuModuleLoadData(cubin), cuLibraryLoadData + cuLibraryGetKernel,
// cuLibraryLoadFromFile, cuModuleLoadFatBinary (FATBIN, when given); launches with
// cuLaunchKernel, cuLaunchKernelEx and cuLaunchCooperativeKernel.
// Output: `driver_api paths=P launches=L threads=T ok`
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <string>
#include <cuda.h>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_ = 0; cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); exit(2); } } while (0)

static std::string slurp(const char *p) {
    FILE *f = fopen(p, "rb"); if (!f) { perror(p); exit(2); }
    std::string s; char buf[65536]; size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, k);
    fclose(f); return s;
}

static int n = 4096, block = 128, grid = (4096 + 127) / 128;
static long long launches = 0, threads = 0;
static CUdeviceptr da, db, dc;

static void check(const char *what) {
    std::vector<float> c(n);
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(c.data(), dc, n * 4));
    for (int i = 0; i < n; i++) if (c[i] != (float)i + 2.0f * i) { fprintf(stderr, "%s: mismatch at %d\n", what, i); exit(1); }
    CK(cuMemsetD32(dc, 0, n));
}

static void launch_all(CUfunction f, const char *what) {
    void *args[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, 0, args, 0)); launches++; threads += grid * block; check(what);
    CUlaunchConfig cfg; memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = grid; cfg.gridDimY = 1; cfg.gridDimZ = 1; cfg.blockDimX = block; cfg.blockDimY = 1; cfg.blockDimZ = 1;
    CK(cuLaunchKernelEx(&cfg, f, args, 0)); launches++; threads += grid * block; check(what);
    CK(cuLaunchCooperativeKernel(f, grid, 1, 1, block, 1, 1, 0, 0, args)); launches++; threads += grid * block; check(what);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: driver_api PTXFILE [FATBIN]\n"); return 2; }
    std::string ptx = slurp(argv[1]);
    CK(cuInit(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    std::vector<float> a(n), b(n);
    for (int i = 0; i < n; i++) { a[i] = (float)i; b[i] = 2.0f * i; }
    CK(cuMemAlloc(&da, n * 4)); CK(cuMemAlloc(&db, n * 4)); CK(cuMemAlloc(&dc, n * 4));
    CK(cuMemcpyHtoD(da, a.data(), n * 4)); CK(cuMemcpyHtoD(db, b.data(), n * 4));
    int paths = 0;
    CUmodule m; CUfunction f;
    CK(cuModuleLoadData(&m, ptx.c_str())); CK(cuModuleGetFunction(&f, m, "_Z9vectorAddPKfS0_Pfi"));
    launch_all(f, "cuModuleLoadData"); paths++;
    char log[4096]; CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(size_t)sizeof log};
    CUmodule m2; CK(cuModuleLoadDataEx(&m2, ptx.c_str(), 2, opts, vals)); CK(cuModuleGetFunction(&f, m2, "_Z9vectorAddPKfS0_Pfi"));
    launch_all(f, "cuModuleLoadDataEx"); paths++;
    CUmodule m3; CK(cuModuleLoad(&m3, argv[1])); CK(cuModuleGetFunction(&f, m3, "_Z9vectorAddPKfS0_Pfi"));
    launch_all(f, "cuModuleLoad"); paths++;
    CUlinkState ls; CK(cuLinkCreate(0, 0, 0, &ls));
    CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)ptx.c_str(), ptx.size() + 1, "vecadd.ptx", 0, 0, 0));
    void *cubin; size_t cubin_size; CK(cuLinkComplete(ls, &cubin, &cubin_size));
    CUmodule m4; CK(cuModuleLoadData(&m4, cubin)); CK(cuModuleGetFunction(&f, m4, "_Z9vectorAddPKfS0_Pfi"));
    launch_all(f, "cuLink"); paths++;
    CK(cuLinkDestroy(ls));
    CUlibrary lib; CUkernel k;
    CK(cuLibraryLoadData(&lib, ptx.c_str(), 0, 0, 0, 0, 0, 0)); CK(cuLibraryGetKernel(&k, lib, "_Z9vectorAddPKfS0_Pfi"));
    CK(cuKernelGetFunction(&f, k)); launch_all(f, "cuLibraryLoadData"); paths++;
    CUlibrary lib2; CK(cuLibraryLoadFromFile(&lib2, argv[1], 0, 0, 0, 0, 0, 0)); CK(cuLibraryGetKernel(&k, lib2, "_Z9vectorAddPKfS0_Pfi"));
    CK(cuKernelGetFunction(&f, k)); launch_all(f, "cuLibraryLoadFromFile"); paths++;
    if (argc > 2) {
        std::string fb = slurp(argv[2]);
        CUmodule m5; CK(cuModuleLoadFatBinary(&m5, fb.data())); CK(cuModuleGetFunction(&f, m5, "_Z9vectorAddPKfS0_Pfi"));
        launch_all(f, "cuModuleLoadFatBinary"); paths++;
    }
    printf("driver_api paths=%d launches=%lld threads=%lld ok\n", paths, launches, threads);
    return 0;
}
