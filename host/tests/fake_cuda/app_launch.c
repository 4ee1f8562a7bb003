/* app_launch: a driver-API program linked with -lcuda (the fake) that loads PTX, takes one
 * kernel and launches it: LAUNCHES times through kernelParams, once through `extra`'s
 * parameter buffer, and once as a graph kernel node.
 * Usage: app_launch PTX KERNEL NPARAMS LAUNCHES (the kernel's own parameters: NPARAMS u64s).
 * With $APP_WAIT=W and $APP_PHASES=P (> 1): P phases of LAUNCHES launches; after phase k
 * (k < P) it creates W.ready<k> and waits (up to 30 s) for W.go<k> (hot attach tests). */
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult; typedef void *H;
CUresult cuInit(unsigned); CUresult cuModuleLoadData(H *, const void *);
CUresult cuModuleGetFunction(H *, H, const char *);
CUresult cuLaunchKernel(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **, void **);
CUresult cuGraphAddKernelNode_v2(H *, H, const H *, size_t, const void *);
static char *slurp(const char *path) {
	FILE *f = fopen(path, "rb"); if (!f) { perror(path); exit(2); }
	fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
	char *b = calloc(1, len + 1); if (fread(b, 1, len, f) != (size_t)len) exit(2); fclose(f); return b;
}
#define CK(x) do { if ((x) != 0) { fprintf(stderr, "%s failed\n", #x); return 3; } } while (0)
int main(int argc, char **argv) {
	if (argc < 5) return 2;
	int np = atoi(argv[3]), n = atoi(argv[4]);
	uint64_t vals[16]; void *params[16];
	for (int i = 0; i < np && i < 16; i++) { vals[i] = 100 + i; params[i] = &vals[i]; }
	H m, f, node;
	CK(cuInit(0));
	CK(cuModuleLoadData(&m, slurp(argv[1])));
	CK(cuModuleGetFunction(&f, m, argv[2]));
	const char *w = getenv("APP_WAIT");
	int phases = getenv("APP_PHASES") ? atoi(getenv("APP_PHASES")) : 1;
	for (int ph = 1; ph <= phases; ph++) {
		for (int i = 0; i < n; i++) CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, params, 0));
		if (!w || ph == phases) break;
		char p[4096]; snprintf(p, sizeof p, "%s.ready%d", w, ph);
		FILE *r = fopen(p, "w"); if (r) fclose(r);
		snprintf(p, sizeof p, "%s.go%d", w, ph);
		for (int t = 0; t < 3000 && access(p, F_OK); t++) usleep(10000);
	}
	size_t size = 8 * np;
	void *extra[] = {(void *)1, vals, (void *)2, &size, (void *)0};
	CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, 0, extra));
	/* CUDA_KERNEL_NODE_PARAMS_v2: func, 7 u32 dims, kernelParams, extra, kern, ctx. */
	unsigned char np2[72] = {0}; unsigned dims[7] = {1, 1, 1, 32, 1, 1, 0}; void **pp = params;
	memcpy(np2, &f, 8); memcpy(np2 + 8, dims, sizeof dims); memcpy(np2 + 40, &pp, 8);
	CK(cuGraphAddKernelNode_v2(&node, 0, 0, 0, np2));
	printf("app_launch ok launches=%d\n", n * (w ? phases : 1) + 2);
	return 0;
}
