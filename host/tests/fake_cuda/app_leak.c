/* app_leak: device allocations from two call sites, some never freed, for
 * examples/cumem_leak.bpf.c. alloc_buffers() allocates 3 x 4096 bytes and frees one;
 * alloc_table() allocates 1000 bytes and keeps it; a freed 64-byte scratch allocation in
 * main() leaves nothing. Outstanding at exit: 8192 bytes from alloc_buffers (2
 * allocations), 1000 from alloc_table (1). Linked with -rdynamic so that the stack's
 * functions have names in the dynamic symbol table. */
#include <stdint.h>
#include <stdio.h>
typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuMemAlloc_v2(uint64_t *, size_t);
CUresult cuMemFree_v2(uint64_t);
__attribute__((noinline)) int alloc_buffers(uint64_t *d) {
	for (int i = 0; i < 3; i++)
		if (cuMemAlloc_v2(&d[i], 4096)) return 1;
	return cuMemFree_v2(d[1]);
}
__attribute__((noinline)) int alloc_table(uint64_t *t) { return cuMemAlloc_v2(t, 1000); }
int main(void) {
	uint64_t d[3], t, s;
	if (cuInit(0) || alloc_buffers(d) || alloc_table(&t)) return 2;
	if (cuMemAlloc_v2(&s, 64) || cuMemFree_v2(s)) return 3;
	printf("app_leak ok\n");
	return 0;
}
