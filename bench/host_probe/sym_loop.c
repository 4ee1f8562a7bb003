/* sym_loop: a library function (host/tests/fake_cuda/libbpftsym.c's sym_add, eight
 * arguments) called through the PLT in a tight loop, for the cost of a host probe on a
 * library function (attach/src/shim/symprobes.rs). Prints the median over 50 batches of
 * 20,000 calls of the time per call, and the sum of the results (checked by the script).
 * Output: `sym_loop calls=N ns_per_call=T sum=S` */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
long sym_add(long a, long b, long c, long d, long e, long f, long g, long h);
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(void) {
	enum { BATCHES = 50, CALLS = 20000 };
	double per[BATCHES];
	long sum = 0;
	for (int b = 0; b < BATCHES; b++) {
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (long i = 0; i < CALLS; i++)
			sum += sym_add(i, 1, 0, 0, 0, 0, 0, 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		per[b] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / CALLS;
	}
	qsort(per, BATCHES, sizeof per[0], cmp);
	printf("sym_loop calls=%d ns_per_call=%.1f sum=%ld\n", BATCHES * CALLS, per[BATCHES / 2], sum);
	return 0;
}
