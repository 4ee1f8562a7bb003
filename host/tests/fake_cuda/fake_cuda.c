/*
 * fake libcuda.so.1 for the attach tests (CI has no GPU). It implements the driver calls the
 * shim and the test apps use, and records what it was given: every image loaded goes to
 * $FAKE_CUDA_DIR/load-<n>-<call>.<ptx|bin>, and one line per call to $FAKE_CUDA_DIR/calls.log.
 * cuMemHostGetDevicePointer returns the host address (unified addressing), so the map
 * addresses baked into instrumented PTX can be checked against the session region.
 * "Device memory" (cuMemAlloc) is host memory; the fake cuLaunchKernel runs no code, but
 * adds 1 to the 8-byte word at offset 128 of every 256-byte block of every live allocation:
 * value 0 of a one-entry u64 array map (its values start at 128), once per copy when the
 * map is striped (256-byte strides). Tests see what comes back from device-resident maps.
 * Functions (cuModuleGetFunction) know their name and parameter count from the PTX their
 * module was loaded from; launching one logs "cuLaunchKernel NAME params=N last=A,B" (its
 * last two parameter values: the hidden correlation id and launch time when it has them).
 * The shim's clock kernel (__bpftime_clock) is played by a thread whose %globaltimer is
 * CLOCK_MONOTONIC + FAKE_CLOCK_OFFSET_NS (default 1 s).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void *H;
static int loads;

static void logf_(const char *fmt, const char *a, const char *b) {
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (!dir) return;
	char p[4096];
	snprintf(p, sizeof p, "%s/calls.log", dir);
	FILE *f = fopen(p, "a");
	if (!f) return;
	fprintf(f, fmt, a, b);
	fputc('\n', f);
	fclose(f);
}

static size_t fatbin_len(const unsigned char *p) {
	uint32_t magic; memcpy(&magic, p, 4);
	if (magic == 0x466243b1u) { const unsigned char *d; memcpy(&d, p + 8, 8); return fatbin_len(d); }
	if (magic == 0xBA55ED50u) { uint16_t hs; uint64_t sz; memcpy(&hs, p + 6, 2); memcpy(&sz, p + 8, 8); return hs + sz; }
	if (p[0] == 0x7f && p[1] == 'E') { uint64_t shoff; uint16_t shentsize, shnum; memcpy(&shoff, p + 0x28, 8);
		memcpy(&shentsize, p + 0x3a, 2); memcpy(&shnum, p + 0x3c, 2); return shoff + (size_t)shentsize * shnum; }
	return strlen((const char *)p);
}

/* What the fake cuLinkComplete returns; loading it is logged as "linked". */
static char cubin[64] = "\x7f" "ELF";
static void record(const char *call, const void *image, size_t len) {
	if (!memcmp(image, cubin, sizeof cubin)) { logf_("%s %s", call, "linked"); return; }
	const char *dir = getenv("FAKE_CUDA_DIR");
	const unsigned char *p = image;
	int is_ptx = 1;
	for (size_t i = 0; i < 64 && p[i]; i++) if (p[i] < 9) { is_ptx = 0; break; }
	if (len == 0) len = is_ptx ? strlen(image) : fatbin_len(p);
	if (p[0] == 0xb1 && p[1] == 0x43) { const unsigned char *d; memcpy(&d, p + 8, 8); p = d; is_ptx = 0; }
	char name[4096];
	snprintf(name, sizeof name, "%s/load-%02d-%s.%s", dir ? dir : ".", loads++, call, is_ptx ? "ptx" : "bin");
	if (dir) { FILE *f = fopen(name, "wb"); if (f) { fwrite(p, 1, len, f); fclose(f); } }
	logf_("%s %s", call, strstr((const char *)image, "bpftime-super: k") && is_ptx ? "instrumented" : "original");
}

CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = o; return 0; }
static int ctx_obj;
CUresult cuDevicePrimaryCtxRetain(H *c, int d) { (void)d; *c = &ctx_obj; return 0; }
CUresult cuCtxSetCurrent(H c) { (void)c; return 0; }
CUresult cuCtxGetCurrent(H *c) { *c = &ctx_obj; return 0; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) { (void)d; *v = attr == 75 ? 9 : attr == 76 ? 0 : 1; return 0; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned f) { char b[64]; snprintf(b, sizeof b, "%zu", n); (void)p; (void)f; logf_("cuMemHostRegister %s%s", b, ""); return 0; }
CUresult cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned f) { (void)f; *d = (uint64_t)(uintptr_t)p; return 0; }
CUresult cuGetErrorString(CUresult r, const char **s) { (void)r; *s = "fake"; return 0; }
/* Modules: the PTX text each was loaded from (NULL for binaries), for cuModuleGetFunction. */
static struct mod { char *text; } mods[256];
static int nmods;
static H module_of(const void *img) {
	const unsigned char *p = img; int is_ptx = 1;
	for (size_t i = 0; i < 64 && p[i]; i++) if (p[i] < 9) { is_ptx = 0; break; }
	struct mod *m = &mods[nmods < 255 ? nmods++ : 255];
	m->text = is_ptx ? strdup(img) : 0;
	return m;
}
CUresult cuModuleLoadData(H *m, const void *img) {
	if (!strstr((const char *)img, "__bpftime_clock")) record("cuModuleLoadData", img, 0);
	*m = module_of(img); return 0; }
CUresult cuModuleLoadDataEx(H *m, const void *img, unsigned n, int *o, void **v) { (void)n; (void)o; (void)v; record("cuModuleLoadDataEx", img, 0); *m = module_of(img); return 0; }
CUresult cuModuleLoadFatBinary(H *m, const void *img) { record("cuModuleLoadFatBinary", img, 0); *m = &mods[255]; return 0; }
static int mod_obj;
static char *slurp(const char *path, size_t *n) {
	FILE *f = fopen(path, "rb"); if (!f) return 0;
	fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
	char *b = calloc(1, len + 1); if (fread(b, 1, len, f) != (size_t)len) { fclose(f); free(b); return 0; }
	fclose(f); *n = len; return b;
}
CUresult cuModuleLoad(H *m, const char *path) { size_t n; char *b = slurp(path, &n); if (!b) return 301; record("cuModuleLoad", b, n); free(b); *m = &mod_obj; return 0; }
CUresult cuLibraryLoadData(H *l, const void *code, int *jo, void **jv, unsigned nj, int *lo, void **lv, unsigned nl) {
	(void)jo; (void)jv; (void)nj; (void)lo; (void)lv; (void)nl; record("cuLibraryLoadData", code, 0); *l = &mod_obj; return 0; }
CUresult cuLibraryLoadFromFile(H *l, const char *path, int *jo, void **jv, unsigned nj, int *lo, void **lv, unsigned nl) {
	(void)jo; (void)jv; (void)nj; (void)lo; (void)lv; (void)nl; size_t n; char *b = slurp(path, &n); if (!b) return 301;
	record("cuLibraryLoadFromFile", b, n); free(b); *l = &mod_obj; return 0; }
static int link_obj;
CUresult cuLinkCreate_v2(unsigned n, int *o, void **v, H *s) { (void)n; (void)o; (void)v; *s = &link_obj; return 0; }
CUresult cuLinkAddData_v2(H s, unsigned type, void *data, size_t size, const char *name, unsigned n, int *o, void **v) {
	(void)s; (void)name; (void)n; (void)o; (void)v; char c[64]; snprintf(c, sizeof c, "cuLinkAddData.type%u", type); record(c, data, type == 1 ? 0 : size); return 0; }
CUresult cuLinkAddFile_v2(H s, unsigned type, const char *path, unsigned n, int *o, void **v) {
	(void)s; (void)n; (void)o; (void)v; size_t len; char *b = slurp(path, &len); if (!b) return 301; char c[64];
	snprintf(c, sizeof c, "cuLinkAddFile.type%u", type); record(c, b, len); free(b); return 0; }
CUresult cuLinkComplete(H s, void **out, size_t *n) { (void)s; *out = cubin; *n = sizeof cubin; return 0; }
CUresult cuLinkDestroy(H s) { (void)s; return 0; }

static struct { char *p; size_t n; } allocs[64];
static int nallocs;
static void logz(const char *what, size_t n) { char b[64]; snprintf(b, sizeof b, "%zu", n); logf_("%s %s", what, b); }
CUresult cuMemAlloc_v2(uint64_t *d, size_t n) {
	size_t r = (n + 255) / 256 * 256; char *p = aligned_alloc(256, r ? r : 256); /* cuMemAlloc aligns to 256 */
	if (!p || nallocs == 64) return 2; memset(p, 0, r ? r : 256);
	allocs[nallocs].p = p; allocs[nallocs++].n = n; *d = (uint64_t)(uintptr_t)p; logz("cuMemAlloc", n); return 0; }
CUresult cuMemFree_v2(uint64_t d) {
	for (int i = 0; i < nallocs; i++) if ((uint64_t)(uintptr_t)allocs[i].p == d) { free(allocs[i].p); allocs[i] = allocs[--nallocs]; return 0; }
	return 1; }
static int stream_obj;
CUresult cuStreamCreate(H *s, unsigned flags) { *s = &stream_obj; logz("cuStreamCreate", flags); return 0; }
CUresult cuStreamSynchronize(H s) { (void)s; return 0; }
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void *h, size_t n, H s) { (void)s; memcpy((void *)(uintptr_t)d, h, n); logz("cuMemcpyHtoDAsync", n); return 0; }
CUresult cuMemsetD8Async(uint64_t d, unsigned char v, size_t n, H s) { (void)s; memset((void *)(uintptr_t)d, v, n); logz("cuMemsetD8Async", n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *h, uint64_t d, size_t n, H s) { (void)s; memcpy(h, (void *)(uintptr_t)d, n); logz("cuMemcpyDtoHAsync", n); return 0; }
/* Copies for the API log test: 1 (CUDA_ERROR_INVALID_VALUE) for a null device pointer. */
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *h, size_t n) { if (!d) return 1; memcpy((void *)(uintptr_t)d, h, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *h, uint64_t d, size_t n) { if (!d) return 1; memcpy(h, (void *)(uintptr_t)d, n); return 0; }
CUresult cuMemcpy(uint64_t d, uint64_t s, size_t n) { memcpy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return 0; }
CUresult cuMemcpyHtoDAsync_v2_ptsz(uint64_t d, const void *h, size_t n, H s) { (void)s; memcpy((void *)(uintptr_t)d, h, n); return 0; }
CUresult cuMemAllocHost_v2(void **p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
CUresult cuMemFreeHost(void *p) { free(p); return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE: device (2) inside a cuMemAlloc, else not the driver's (1). */
CUresult cuPointerGetAttribute(void *v, int attr, uint64_t p) {
	if (attr != 2) return 1;
	for (int i = 0; i < nallocs; i++)
		if (p >= (uint64_t)(uintptr_t)allocs[i].p && p < (uint64_t)(uintptr_t)allocs[i].p + allocs[i].n) { *(unsigned *)v = 2; return 0; }
	return 1; }
static int primary_active = 1;
CUresult cuDevicePrimaryCtxGetState(int d, unsigned *flags, int *active) { (void)d; *flags = 0; *active = primary_active; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; primary_active = 0; logz("cuDevicePrimaryCtxRelease", d); return 0; }
CUresult cuDevicePrimaryCtxReset_v2(int d) { (void)d; primary_active = 0; logz("cuDevicePrimaryCtxReset", d); return 0; }
CUresult cuCtxDestroy_v2(H c) { (void)c; primary_active = 0; logf_("cuCtxDestroy%s%s", "", ""); return 0; }
/* Functions: name and parameter count, from their module's PTX. */
static struct fn { char name[256]; int nparams; H mod; } fns[256];
static int nfns;
static struct fn *fn_of(H f) { return (struct fn *)f >= fns && (struct fn *)f < fns + nfns ? (struct fn *)f : 0; }
CUresult cuModuleGetFunction(H *f, H m, const char *name) {
	struct mod *md = m; if (!md || !md->text || nfns == 256) return 500;
	char pat[300]; snprintf(pat, sizeof pat, ".entry %s(", name);
	char *at = strstr(md->text, pat); if (!at) return 500;
	char *end = strchr(at, ')'); int n = 0;
	for (char *q = at; (q = strstr(q, ".param")) && q < end; q++) n++;
	struct fn *fp = &fns[nfns++]; snprintf(fp->name, sizeof fp->name, "%s", name); fp->nparams = n; fp->mod = m;
	*f = fp; return 0; }
CUresult cuFuncGetModule(H *m, H f) { struct fn *fp = fn_of(f); if (!fp) return 400; *m = fp->mod; return 0; }
CUresult cuFuncGetName(const char **name, H f) { struct fn *fp = fn_of(f); if (!fp) return 400; *name = fp->name; return 0; }
CUresult cuFuncGetParamInfo(H f, size_t i, size_t *off, size_t *size) {
	struct fn *fp = fn_of(f); if (!fp) return 400; if (i >= (size_t)fp->nparams) return 1; *off = 8 * i; *size = 8; return 0; }
static uint64_t mono(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
/* The clock kernel (attach::shim::clock's protocol): publishes its start time in word 9,
 * then answers each ping (word 0) with one word 8: the ping's low 24 bits above the 40 low
 * bits of the time since its start. */
static void *clock_kernel(void *mbox) {
	volatile uint64_t *w = mbox; uint64_t last = 0, off = getenv("FAKE_CLOCK_OFFSET_NS") ? strtoull(getenv("FAKE_CLOCK_OFFSET_NS"), 0, 10) : 1000000000ull;
	uint64_t base = mono() + off;
	__atomic_store_n(&w[9], base, __ATOMIC_SEQ_CST);
	for (uint64_t deadline = mono() + 200000000ull; mono() < deadline;) {
		uint64_t k = __atomic_load_n(&w[0], __ATOMIC_ACQUIRE);
		if (k == last) continue;
		if (k == UINT64_MAX) break;
		uint64_t dt = mono() + off - base;
		__atomic_store_n(&w[8], (k & 0xffffffull) << 40 | (dt & ((1ull << 40) - 1)), __ATOMIC_RELEASE);
		last = k;
	}
	return 0; }
static void log_launch(const char *call, H f, void **p, void **e) {
	static int dir = -1;
	if (dir < 0) dir = getenv("FAKE_CUDA_DIR") != 0;
	if (!dir) return; /* benchmarks: nothing to log, nothing to format */
	struct fn *fp = fn_of(f);
	if (!fp) { logf_("%s%s", call, ""); return; }
	uint64_t a = 0, b = 0; int n = fp->nparams;
	if (p && n >= 2) { memcpy(&a, p[n - 2], 8); memcpy(&b, p[n - 1], 8); }
	else if (e && n >= 2) { /* CU_LAUNCH_PARAM_BUFFER_POINTER, buf, _SIZE, &size, END: the last 16 bytes */
		size_t sz; memcpy(&sz, e[3], sizeof sz); memcpy(&a, (char *)e[1] + sz - 16, 8); memcpy(&b, (char *)e[1] + sz - 8, 8); }
	char buf[512]; snprintf(buf, sizeof buf, "%s %s params=%d last=%llu,%llu", call, fp->name, n, (unsigned long long)a, (unsigned long long)b);
	logf_("%s%s", buf, ""); }
CUresult cuLaunchKernel(H f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned sh, H s, void **p, void **e) {
	(void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sh; (void)s;
	struct fn *fp = fn_of(f);
	if (fp && !strcmp(fp->name, "__bpftime_clock")) {
		/* One stream: a launch starts after the previous one has ended. */
		static pthread_t prev; static int running;
		if (running) pthread_join(prev, 0);
		uint64_t mbox; memcpy(&mbox, p[0], 8);
		if (pthread_create(&prev, 0, clock_kernel, (void *)(uintptr_t)mbox)) { running = 0; return 2; }
		running = 1; return 0; }
	for (int i = 0; i < nallocs; i++)
		for (size_t o = 128; o + 8 <= allocs[i].n; o += 256) { uint64_t v; memcpy(&v, allocs[i].p + o, 8); v++; memcpy(allocs[i].p + o, &v, 8); }
	log_launch("cuLaunchKernel", f, p, e); return 0; }
/* CUDA_KERNEL_NODE_PARAMS_v2: func, grid/block/shared (7 u32), kernelParams, extra, kern, ctx. */
CUresult cuGraphAddKernelNode_v2(H *node, H g, const H *deps, size_t n, const void *params) {
	(void)g; (void)deps; (void)n; H f; void **p, **e; memcpy(&f, params, 8); memcpy(&p, (char *)params + 40, 8); memcpy(&e, (char *)params + 48, 8);
	log_launch("cuGraphAddKernelNode", f, p, e); *node = &mod_obj; return 0; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; *p = aligned_alloc(128, (n + 127) / 128 * 128); if (!*p) return 2; memset(*p, 0, n); return 0; }

struct entry { const char *name; void *fn; };
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status);
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, uint64_t flags);
static const struct entry table[] = {
	{"cuInit", cuInit}, {"cuDeviceGet", cuDeviceGet}, {"cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain},
	{"cuCtxSetCurrent", cuCtxSetCurrent}, {"cuModuleLoadData", cuModuleLoadData}, {"cuModuleLoadDataEx", cuModuleLoadDataEx},
	{"cuModuleLoadFatBinary", cuModuleLoadFatBinary}, {"cuModuleLoad", cuModuleLoad}, {"cuLibraryLoadData", cuLibraryLoadData},
	{"cuLibraryLoadFromFile", cuLibraryLoadFromFile}, {"cuLinkCreate", cuLinkCreate_v2}, {"cuLinkAddData", cuLinkAddData_v2},
	{"cuLinkAddFile", cuLinkAddFile_v2}, {"cuLinkComplete", cuLinkComplete}, {"cuLinkDestroy", cuLinkDestroy},
	{"cuCtxGetCurrent", cuCtxGetCurrent}, {"cuCtxGetDevice", cuCtxGetDevice}, {"cuDeviceGetAttribute", cuDeviceGetAttribute},
	{"cuMemHostRegister", cuMemHostRegister_v2}, {"cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2},
	{"cuMemAlloc", cuMemAlloc_v2}, {"cuMemFree", cuMemFree_v2}, {"cuStreamCreate", cuStreamCreate},
	{"cuStreamSynchronize", cuStreamSynchronize}, {"cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2},
	{"cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2}, {"cuMemsetD8Async", cuMemsetD8Async}, {"cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState},
	{"cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2}, {"cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2},
	{"cuCtxDestroy", cuCtxDestroy_v2}, {"cuLaunchKernel", cuLaunchKernel},
	{"cuMemcpyHtoD", cuMemcpyHtoD_v2}, {"cuMemcpyDtoH", cuMemcpyDtoH_v2}, {"cuMemcpy", cuMemcpy},
	{"cuMemAllocHost", cuMemAllocHost_v2}, {"cuMemFreeHost", cuMemFreeHost}, {"cuCtxSynchronize", cuCtxSynchronize},
	{"cuPointerGetAttribute", cuPointerGetAttribute}, {"cuModuleGetFunction", cuModuleGetFunction},
	{"cuFuncGetName", cuFuncGetName}, {"cuFuncGetModule", cuFuncGetModule}, {"cuFuncGetParamInfo", cuFuncGetParamInfo}, {"cuMemHostAlloc", cuMemHostAlloc},
	{"cuGraphAddKernelNode", cuGraphAddKernelNode_v2},
	{0, 0}};
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status) {
	/* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM picks the _ptsz twin. */
	if ((flags & 2) && !strcmp(sym, "cuMemcpyHtoDAsync")) { *pfn = cuMemcpyHtoDAsync_v2_ptsz; if (status) *status = 1; return 0; }
	if (!strcmp(sym, "cuGetProcAddress")) { *pfn = ver >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress; if (status) *status = 1; return 0; }
	for (const struct entry *e = table; e->name; e++) if (!strcmp(e->name, sym)) { *pfn = e->fn; if (status) *status = 1; return 0; }
	*pfn = 0; if (status) *status = 0; return 500;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, uint64_t flags) { return cuGetProcAddress_v2(sym, pfn, ver, flags, 0); }
