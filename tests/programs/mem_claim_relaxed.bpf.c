// mem_claim.bpf.c with BPFTIME_RELAXED_ATOMICS: its probes' fetching atomics are relaxed.
#define NAME(x) x##_relaxed
#include "mem_claim.bpf.c"
BPFTIME_RELAXED_ATOMICS;
