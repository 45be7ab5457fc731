// prog.c is the workload binary of the ELF tests: a few functions that
// the compiler must keep apart, one with a C++-mangled name.
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int leaf(int x) {
	volatile int v = x;
	for (int i = 0; i < 16; i++)
		v = v * 31 + i;
	return v;
}

// A weak alias at leaf's address: the symbolizer must prefer "leaf".
int leaf_alias(int x) __attribute__((weak, alias("leaf")));

__attribute__((noinline)) int middle(int x) {
	return leaf(x) + leaf(x + 1);
}

// ns::mangled(int), named as a C++ compiler would name it.
__attribute__((noinline)) int mangled(int x) __asm__("_ZN2ns7mangledEi");
__attribute__((noinline)) int mangled(int x) {
	return middle(x) * 3;
}

// Two functions without st_size, as hand-written assembly often has: each
// covers the bytes up to the next symbol.
__asm__(".text\n"
	".p2align 4\n"
	".globl nosize\n"
	".type nosize, @function\n"
	"nosize:\n"
	"\tnop\n\tnop\n\tnop\n\tret\n"
	".p2align 4\n"
	".globl nosize_next\n"
	".type nosize_next, @function\n"
	"nosize_next:\n"
	"\tret\n");

int main(int argc, char **argv) {
	(void)argv;
	printf("%d\n", mangled(argc));
	return 0;
}
