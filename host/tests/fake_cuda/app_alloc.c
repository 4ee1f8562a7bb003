/* app_alloc: loads a PTX module, allocates device memory of each size given (printing each
 * address), launches once, frees the first allocation and exits 0; $FAKE_SLEEP_MS: sleep
 * that long before exiting; $FAKE_EXIT_FILE: first wait (at most 60 s) until that file exists.
 * A size written kv:SIZE is allocated inside kv_cache_alloc (a call site by name).
 * Usage: app_alloc PTX SIZE... */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
typedef int CUresult; typedef void *H;
CUresult cuInit(unsigned); CUresult cuModuleLoadData(H *, const void *);
CUresult cuMemAlloc_v2(uint64_t *, size_t); CUresult cuMemFree_v2(uint64_t);
CUresult cuLaunchKernel(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **, void **);
static char *slurp(const char *path) {
	FILE *f = fopen(path, "rb"); if (!f) { perror(path); exit(2); }
	fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
	char *b = calloc(1, len + 1); if (fread(b, 1, len, f) != (size_t)len) exit(2); fclose(f); return b;
}
/* Not inlined, and with a frame, so that a probe can patch its entry. */
__attribute__((noinline)) CUresult kv_cache_alloc(uint64_t *d, size_t size) {
	volatile size_t s = size;
	CUresult r = cuMemAlloc_v2(d, s);
	return r;
}
int main(int argc, char **argv) {
	H m; uint64_t first = 0;
	if (argc < 3 || cuInit(0) || cuModuleLoadData(&m, slurp(argv[1]))) return 3;
	for (int i = 2; i < argc; i++) {
		uint64_t d;
		int kv = strncmp(argv[i], "kv:", 3) == 0;
		const char *n = kv ? argv[i] + 3 : argv[i];
		if ((kv ? kv_cache_alloc(&d, strtoull(n, 0, 10)) : cuMemAlloc_v2(&d, strtoull(n, 0, 10)))) return 4;
		if (!first) first = d;
		printf("alloc %s at 0x%llx\n", argv[i], (unsigned long long)d);
	}
	if (cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0) || cuMemFree_v2(first)) return 5;
	printf("app_alloc ok\n");
	fflush(stdout);
	if (getenv("FAKE_SLEEP_MS")) usleep(atoi(getenv("FAKE_SLEEP_MS")) * 1000);
	for (int i = 0; getenv("FAKE_EXIT_FILE") && i < 6000; i++) {
		if (access(getenv("FAKE_EXIT_FILE"), F_OK) == 0) break;
		usleep(10000);
	}
	return 0;
}
