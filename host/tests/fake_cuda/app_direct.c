/* app_direct: a driver-API program linked with -lcuda (the fake), loading through every
 * image call, then launching LAUNCHES times (default 0).
 * Usage: app_direct PTX FATBIN EXITCODE [LAUNCHES]; $FAKE_SLEEP_MS: sleep that long before
 * exiting (while a test scrapes trace's exporter). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef int CUresult; typedef void *H;
CUresult cuInit(unsigned); CUresult cuModuleLoadData(H *, const void *);
CUresult cuModuleLoadDataEx(H *, const void *, unsigned, int *, void **);
CUresult cuModuleLoad(H *, const char *); CUresult cuModuleLoadFatBinary(H *, const void *);
CUresult cuLibraryLoadData(H *, const void *, int *, void **, unsigned, int *, void **, unsigned);
CUresult cuLibraryLoadFromFile(H *, const char *, int *, void **, unsigned, int *, void **, unsigned);
CUresult cuLinkCreate_v2(unsigned, int *, void **, H *);
CUresult cuLinkAddData_v2(H, unsigned, void *, size_t, const char *, unsigned, int *, void **);
CUresult cuLinkAddFile_v2(H, unsigned, const char *, unsigned, int *, void **);
CUresult cuLinkComplete(H, void **, size_t *);
CUresult cuLaunchKernel(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **, void **);
static char *slurp(const char *path, size_t *n) {
	FILE *f = fopen(path, "rb"); if (!f) { perror(path); exit(2); }
	fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
	char *b = calloc(1, len + 1); if (fread(b, 1, len, f) != (size_t)len) exit(2); fclose(f); *n = len; return b;
}
#define CK(x) do { if ((x) != 0) { fprintf(stderr, "%s failed\n", #x); return 3; } } while (0)
int main(int argc, char **argv) {
	size_t n, fn; char *ptx = slurp(argv[1], &n), *fat = slurp(argv[2], &fn);
	H m, l, s; void *cubin; size_t cn;
	CK(cuInit(0));
	CK(cuModuleLoadData(&m, ptx));
	CK(cuModuleLoadDataEx(&m, ptx, 0, 0, 0));
	CK(cuModuleLoad(&m, argv[1]));
	CK(cuModuleLoadFatBinary(&m, fat));
	CK(cuLibraryLoadData(&l, ptx, 0, 0, 0, 0, 0, 0));
	CK(cuLibraryLoadFromFile(&l, argv[1], 0, 0, 0, 0, 0, 0));
	CK(cuLinkCreate_v2(0, 0, 0, &s));
	CK(cuLinkAddData_v2(s, 1, ptx, n + 1, "a.ptx", 0, 0, 0));
	CK(cuLinkAddFile_v2(s, 1, argv[1], 0, 0, 0));
	CK(cuLinkComplete(s, &cubin, &cn));
	CK(cuModuleLoadData(&m, cubin));
	for (int i = 0, n = argc > 4 ? atoi(argv[4]) : 0; i < n; i++) CK(cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0));
	printf("app_direct ok\n");
	fflush(stdout);
	if (getenv("FAKE_SLEEP_MS")) usleep(atoi(getenv("FAKE_SLEEP_MS")) * 1000);
	return atoi(argv[3]);
}
