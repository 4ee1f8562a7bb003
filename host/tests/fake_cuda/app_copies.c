/* app_copies: copies, allocations, a launch and syncs, for `trace --api-log`: linked with
 * -lcuda (the calls go through the shim's exports), then two through cuGetProcAddress as
 * cudart makes them (the per-thread-stream twin of cuMemcpyHtoDAsync, and cuMemcpyDtoH).
 * One copy fails on purpose (a null device pointer). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
typedef int CUresult; typedef void *H;
CUresult cuInit(unsigned);
CUresult cuMemAlloc_v2(uint64_t *, size_t);
CUresult cuMemFree_v2(uint64_t);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemFreeHost(void *);
CUresult cuMemcpyHtoD_v2(uint64_t, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, uint64_t, size_t);
CUresult cuMemcpy(uint64_t, uint64_t, size_t);
CUresult cuMemcpyHtoDAsync_v2(uint64_t, const void *, size_t, H);
CUresult cuLaunchKernel(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **, void **);
CUresult cuStreamSynchronize(H);
CUresult cuCtxSynchronize(void);
CUresult cuGetProcAddress_v2(const char *, void **, int, uint64_t, int *);
typedef CUresult (*htod_async_t)(uint64_t, const void *, size_t, H);
typedef CUresult (*dtoh_t)(void *, uint64_t, size_t);
int main(void) {
	uint64_t d = 0; void *h = 0; int st;
	if (cuInit(0) || cuMemAlloc_v2(&d, 1 << 20) || cuMemAllocHost_v2(&h, 1 << 20)) return 2;
	memset(h, 7, 1 << 20);
	if (cuMemcpyHtoD_v2(d, h, 4096) || cuMemcpyDtoH_v2(h, d, 2048)) return 3;
	if (cuMemcpy(d + 64, (uint64_t)(uintptr_t)h, 1000)) return 3;   /* unified: host to device */
	if (cuMemcpyHtoDAsync_v2(d, h, 512, (H)0x5)) return 3;
	if (cuMemcpyHtoD_v2(0, h, 16) != 1) return 4;                     /* fails: logged with its result */
	if (cuLaunchKernel((H)0x77, 2, 1, 1, 128, 1, 1, 0, (H)0x5, 0, 0)) return 5;
	if (cuStreamSynchronize((H)0x5) || cuCtxSynchronize()) return 6;
	htod_async_t htod = 0; dtoh_t dtoh = 0;
	if (cuGetProcAddress_v2("cuMemcpyHtoDAsync", (void **)&htod, 12000, 2, &st) || !htod) return 7;
	if (cuGetProcAddress_v2("cuMemcpyDtoH", (void **)&dtoh, 12000, 0, &st) || !dtoh) return 7;
	if (htod(d, h, 256, 0) || dtoh(h, d, 128)) return 8;
	if (cuMemFree_v2(d) || cuMemFreeHost(h)) return 9;
	printf("app_copies ok\n");
	return 0;
}
