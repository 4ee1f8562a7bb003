/* app_pause: host probes paused from inside the application. cuMemcpyHtoD_v2 twice with 100
 * bytes, then bpftime_host_probes_pause(1) (found with dlsym(RTLD_DEFAULT): only the shim
 * has it), five copies of 200 bytes, bpftime_host_probes_pause(0), one copy of 300 bytes.
 * Prints whether the switch was found and what it returned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuMemAlloc_v2(uint64_t *, size_t);
CUresult cuMemcpyHtoD_v2(uint64_t, const void *, size_t);
int main(void) {
	static char buf[512];
	uint64_t d;
	if (cuInit(0) || cuMemAlloc_v2(&d, sizeof buf)) return 3;
	int (*pause_probes)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "bpftime_host_probes_pause");
	for (int i = 0; i < 2; i++) if (cuMemcpyHtoD_v2(d, buf, 100)) return 4;
	int was = pause_probes ? pause_probes(1) : -1;
	for (int i = 0; i < 5; i++) if (cuMemcpyHtoD_v2(d, buf, 200)) return 4;
	int paused = pause_probes ? pause_probes(0) : -1;
	if (cuMemcpyHtoD_v2(d, buf, 300)) return 4;
	printf("app_pause ok found=%d was=%d paused=%d\n", pause_probes != 0, was, paused);
	return 0;
}
