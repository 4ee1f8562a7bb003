/* app_cudart: what static cudart does: dlopen libcuda.so.1, dlsym cuGetProcAddress_v2, ask it
 * for cuGetProcAddress itself, resolve the rest through that, and load a registered fat binary
 * (a wrapper struct pointing at the container) with cuLibraryLoadData.
 * Usage: app_cudart FATBIN */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
typedef int CUresult; typedef void *H;
typedef CUresult (*gpa_t)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*lib_t)(H *, const void *, int *, void **, unsigned, int *, void **, unsigned);
typedef CUresult (*init_t)(unsigned);
struct wrapper { int magic, version; const void *data; void *filename; };
int main(int argc, char **argv) {
	(void)argc;
	FILE *f = fopen(argv[1], "rb"); if (!f) return 2;
	fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
	void *fat = aligned_alloc(16, (len + 15) / 16 * 16); if (fread(fat, 1, len, f) != (size_t)len) return 2; fclose(f);
	void *h = dlopen("libcuda.so.1", RTLD_NOW); if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
	gpa_t gpa0 = (gpa_t)dlsym(h, "cuGetProcAddress_v2"); if (!gpa0) return 2;
	gpa_t gpa = 0; int st;
	if (gpa0("cuGetProcAddress", (void **)&gpa, 12000, 0, &st) || !gpa) return 3;
	init_t init = 0; lib_t load = 0;
	if (gpa("cuInit", (void **)&init, 12000, 0, &st) || init(0)) return 3;
	if (gpa("cuLibraryLoadData", (void **)&load, 12000, 0, &st)) return 3;
	struct wrapper w = {0x466243b1, 1, fat, 0};
	H lib;
	if (load(&lib, &w, 0, 0, 0, 0, 0, 0)) return 4;
	/* cudart's teardown: the primary context is released (through cuGetProcAddress). */
	typedef CUresult (*launch_t)(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **, void **);
	typedef CUresult (*release_t)(int);
	launch_t launch = 0; release_t release = 0;
	if (gpa("cuLaunchKernel", (void **)&launch, 12000, 0, &st) || gpa("cuDevicePrimaryCtxRelease", (void **)&release, 12000, 0, &st)) return 3;
	for (int i = 0; i < 2; i++) if (launch(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0)) return 5;
	if (release(0)) return 6;
	/* A launch after the release is not seen (the copies stopped). */
	if (launch(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0)) return 5;
	printf("app_cudart ok\n");
	return 0;
}
