/* app_offload: what an offload framework does to the driver: 16 host tensors of 1 to 6 KiB
 * copied host-to-device (cuMemcpyHtoDAsync_v2) 600 times, in a skewed, seeded order
 * (a few hot tensors, a cyclic scan over the rest), for the live LRU test of llm-cache. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
typedef int CUresult; typedef void *H;
CUresult cuInit(unsigned);
CUresult cuMemAlloc_v2(uint64_t *, size_t);
CUresult cuMemcpyHtoDAsync_v2(uint64_t, const void *, size_t, H);
CUresult cuStreamSynchronize(H);
int main(void) {
	enum { N = 16 };
	uint64_t d = 0; static char *h[N]; size_t size[N];
	if (cuInit(0) || cuMemAlloc_v2(&d, 1 << 16)) return 2;
	for (int i = 0; i < N; i++) { size[i] = 1024 * (1 + i % 6); h[i] = calloc(1, size[i]); if (!h[i]) return 2; }
	uint32_t x = 12345; int scan = 0;
	for (int k = 0; k < 600; k++) {
		x = x * 1103515245u + 12345u;
		int i = (x >> 16) % 4 == 0 ? (int)((x >> 8) % 3) : 3 + scan++ % (N - 3);
		if (cuMemcpyHtoDAsync_v2(d, h[i], size[i], 0)) return 3;
	}
	if (cuStreamSynchronize(0)) return 4;
	printf("app_offload ok\n");
	return 0;
}
