// A shared library with no CUDA in it, for host probes on library functions
// (tests/programs/uprobe_sym.bpf.c): eight arguments, two of them on the stack.
long sym_add(long a, long b, long c, long d, long e, long f, long g, long h)
{
	return a + b + c + d + e + f + g + h;
}

// Floating-point arguments and results must pass through the probes' stubs untouched.
double sym_scale(double x, double y)
{
	return x * 2.5 + y;
}
