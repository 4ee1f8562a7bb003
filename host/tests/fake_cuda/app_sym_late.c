// Loads libbpftsym.so only at run time (as Python loads its extensions), then calls
// sym_add three times through dlsym. Host probes on it wait for the library.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef long (*add_fn)(long, long, long, long, long, long, long, long);

int main(void)
{
	void *h = dlopen("libbpftsym.so.1", RTLD_NOW);
	if (!h) {
		printf("app_sym_late: %s\n", dlerror());
		return 1;
	}
	add_fn f = (add_fn)dlsym(h, "sym_add");
	long t = 0;
	for (long i = 1; i <= 3; i++)
		t += f(i, 0, 0, 0, 0, 0, 10 * i, 0);
	printf("app_sym_late ok %ld\n", t);
	return 0;
}
