// nested.c is the workload binary of the test of functions whose inlined
// calls are read at their first lookup (dwarfline's inline tree): a GCC
// nested function and an OpenMP region, whose subprogram DIEs lie inside
// another function's, beside plain functions with inlined helpers.
#include <stdio.h>
#include <stdlib.h>

static inline __attribute__((always_inline)) int sq(int x) {
	int y = x * x;
	return y ^ (x >> 3);
}

__attribute__((noinline)) int outer(int n) {
	int acc = 0;
	__attribute__((noinline)) int inner(int k) { return sq(k) + acc; }
	for (int i = 0; i < n; i++)
		acc += inner(i);
	return acc;
}

__attribute__((noinline)) long par(int n) {
	long s = 0;
#pragma omp parallel for reduction(+ : s)
	for (int i = 0; i < n; i++)
		s += sq(i);
	return s;
}

__attribute__((noinline)) int plain(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += sq(i + n);
	return s;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10;
	printf("%d %ld %d\n", outer(n), par(n), plain(n));
	return 0;
}
