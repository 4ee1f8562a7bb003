/* launch_loop: cuLaunchKernel in a tight loop against the fake driver of the attach tests
 * (host/tests/fake_cuda, whose launch does nothing when there is no device memory), linked
 * with -lcuda, so each call goes through the shim's exported wrapper when it is preloaded.
 * Prints the median over 50 batches of 20,000 calls of the time per call.
 * With PTX: loads it and launches its kernel `k(u64, u32)` through a real function handle
 * (what a kernel with hidden launch parameters needs).
 * Output: `launch_loop calls=N ns_per_call=T` */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef int CUresult; typedef void *H;
CUresult cuInit(unsigned); CUresult cuModuleLoadData(H *, const void *);
CUresult cuModuleGetFunction(H *, H, const char *);
CUresult cuLaunchKernel(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **, void **);
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static char *slurp(const char *path) {
	FILE *f = fopen(path, "rb"); if (!f) { perror(path); exit(2); }
	fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
	char *b = calloc(1, len + 1); if (fread(b, 1, len, f) != (size_t)len) exit(2); fclose(f); return b;
}
int main(int argc, char **argv) {
	enum { BATCHES = 50, CALLS = 20000 };
	double per[BATCHES];
	H f = (H)0x1234, m;
	uint64_t a = 1; uint32_t n = 2; void *params[] = {&a, &n};
	if (cuInit(0)) return 2;
	if (argc > 1 && (cuModuleLoadData(&m, slurp(argv[1])) || cuModuleGetFunction(&f, m, "k"))) return 4;
	for (int b = 0; b < BATCHES; b++) {
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int i = 0; i < CALLS; i++)
			if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, argc > 1 ? params : 0, 0)) return 3;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		per[b] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / CALLS;
	}
	qsort(per, BATCHES, sizeof per[0], cmp);
	printf("launch_loop calls=%d ns_per_call=%.1f\n", BATCHES * CALLS, per[BATCHES / 2]);
	return 0;
}
