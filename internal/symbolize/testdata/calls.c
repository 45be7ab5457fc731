// calls.c is the workload of the call-site tests: direct calls, calls
// through a function pointer (a register, a table in memory) and calls
// into libc (through the PLT, or through the GOT with -fno-plt).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*op)(int);

__attribute__((noinline)) int inc(int x) { return x + 1; }
__attribute__((noinline)) int dbl(int x) { return x * 2; }
__attribute__((noinline)) int neg(int x) { return -x; }

static op table[] = {inc, dbl, neg};

struct obj {
	long pad[40];
	op fn;
};

__attribute__((noinline)) int via_table(int i, int x) { return table[i % 3](x) + 1; }
__attribute__((noinline)) int via_reg(op f, int x) { return f(x) * 3; }
__attribute__((noinline)) int via_struct(struct obj *o, int x) { return o->fn(x) + 2; }

__attribute__((noinline)) int chain(int n) {
	if (n <= 0)
		return inc(n);
	return chain(n - 1) + dbl(n);
}

int main(int argc, char **argv) {
	struct obj o = {.fn = neg};
	char buf[64];
	snprintf(buf, sizeof buf, "%d", argc);
	int x = atoi(buf) + (int)strlen(argv[0]);
	x += via_table(x, x) + via_reg(argc > 1 ? inc : dbl, x) + via_struct(&o, x) + chain(x % 7);
	printf("%d\n", x);
	return 0;
}
