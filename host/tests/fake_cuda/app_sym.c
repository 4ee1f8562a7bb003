// Calls libbpftsym.so through its PLT ten times, and once through dlsym. Prints the total
// of the results and a floating-point result; both must be what they are without probes.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

long sym_add(long a, long b, long c, long d, long e, long f, long g, long h);
double sym_scale(double x, double y);

// The application's own function, called directly (no PLT): probed at its entry.
static __attribute__((noinline, noipa)) long app_mul(long a, long b)
{
	return a * b;
}

// Stands for a function of a statically linked cudart.
__attribute__((noinline, noipa)) long cudaFakeSync(long x)
{
	volatile long v = x;
	return v + 1;
}

// Four bytes and a ret at -O1: too short for the jump a probe at its entry needs.
__attribute__((noinline, noipa)) long tiny_inc(long x)
{
	return x + 1;
}

int main(void)
{
	long t = 0;
	for (long i = 1; i <= 10; i++)
		t += sym_add(i, 2, 3, 4, 5, 6, 100 + i, 8);
	long (*f)(long, long, long, long, long, long, long, long) =
		(long (*)(long, long, long, long, long, long, long, long))dlsym(RTLD_DEFAULT, "sym_add");
	if (!f) {
		printf("app_sym: no sym_add\n");
		return 1;
	}
	t += f(1000, 0, 0, 0, 0, 0, 7, 0);
	double s = sym_scale(4.0, 0.25);
	long m = 0;
	for (long i = 1; i <= 4; i++)
		m += app_mul(i, i + 1);
	m += cudaFakeSync(0) + cudaFakeSync(1) - 3 + tiny_inc(-1);
	printf("app_sym ok %ld %.2f %ld\n", t, s, m);
	return 0;
}
