// proclog: an LD_PRELOAD probe (device-side research tool) that logs every dlsym() and every
// cuGetProcAddress*() a CUDA app makes, to learn which driver entry points cudart resolves.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
typedef int (*gpa_t)(const char *, void **, int, uint64_t, int *);
typedef int (*gpa1_t)(const char *, void **, int, uint64_t);
static void *(*real_dlsym)(void *, const char *);
static gpa_t real_gpa2; static gpa1_t real_gpa1;
static void init(void) { if (!real_dlsym) real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"); if (!real_dlsym) real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"); }
static int my_gpa2(const char *s, void **p, int v, uint64_t f, int *st) { int r = real_gpa2(s, p, v, f, st); fprintf(stderr, "[proclog] cuGetProcAddress_v2 %s v=%d flags=%llu -> %d\n", s, v, (unsigned long long)f, r); return r; }
static int my_gpa1(const char *s, void **p, int v, uint64_t f) { int r = real_gpa1(s, p, v, f); fprintf(stderr, "[proclog] cuGetProcAddress %s v=%d flags=%llu -> %d\n", s, v, (unsigned long long)f, r); return r; }
void *dlsym(void *h, const char *s) {
  init(); void *r = real_dlsym(h, s);
  fprintf(stderr, "[proclog] dlsym %s -> %p\n", s, r);
  if (r && !strcmp(s, "cuGetProcAddress_v2")) { real_gpa2 = (gpa_t)r; return (void *)my_gpa2; }
  if (r && !strcmp(s, "cuGetProcAddress")) { real_gpa1 = (gpa1_t)r; return (void *)my_gpa1; }
  return r;
}
