// Frameless leaf: chain_c spins without calling anything, so with
// -momit-leaf-frame-pointer (or any build that keeps frame pointers only
// where a frame is needed) it sets up no frame, and a frame-pointer walk
// from it skips its caller chain_b. CFI unwinding keeps
// main -> chain_a -> chain_b -> chain_c. Runs argv[1] seconds.
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) void chain_c(unsigned long n)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < n; i++) {
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(acc));
	}
	sink = acc;
}

__attribute__((noinline)) void chain_b(unsigned long n)
{
	chain_c(n);
	__asm__ volatile("");
}

__attribute__((noinline)) void chain_a(unsigned long n)
{
	chain_b(n);
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		chain_a(2000000UL);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return 0;
}
