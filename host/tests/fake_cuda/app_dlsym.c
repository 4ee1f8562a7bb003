/* app_dlsym: what CuPy, Numba and PyTorch do: dlopen libcuda.so.1 and dlsym each entry.
 * Usage: app_dlsym PTX */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
typedef int CUresult; typedef void *H;
int main(int argc, char **argv) {
	(void)argc;
	FILE *f = fopen(argv[1], "rb"); if (!f) return 2;
	fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
	char *ptx = calloc(1, len + 1); if (fread(ptx, 1, len, f) != (size_t)len) return 2; fclose(f);
	void *h = dlopen("libcuda.so.1", RTLD_NOW); if (!h) return 2;
	CUresult (*init)(unsigned) = (CUresult (*)(unsigned))dlsym(h, "cuInit");
	CUresult (*load)(H *, const void *) = (CUresult (*)(H *, const void *))dlsym(h, "cuModuleLoadData");
	if (!init || !load || init(0)) return 3;
	H m;
	if (load(&m, ptx)) return 4;
	printf("app_dlsym ok\n");
	return 0;
}
