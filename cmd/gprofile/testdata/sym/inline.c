// inline.c: a hot loop two always_inline levels deep in work, so that one
// machine address holds three functions: gprofile must show
// main;work;inl_mid;inl_leaf (root first), the inlined ones as frames of
// their own. Runs argv[1] seconds (a float).
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline __attribute__((always_inline)) unsigned long inl_leaf(unsigned long n)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < n; i++) {
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(acc));
	}
	return acc;
}

static inline __attribute__((always_inline)) unsigned long inl_mid(unsigned long n)
{
	return inl_leaf(n) ^ (n << 3);
}

__attribute__((noinline)) void consume(unsigned long v)
{
	sink = v;
	__asm__ volatile("");
}

__attribute__((noinline)) void work(unsigned long n)
{
	consume(inl_mid(n));
	__asm__ volatile(""); // no tail call
}

int main(int argc, char **argv)
{
	double end = now() + (argc > 1 ? atof(argv[1]) : 10);
	while (now() < end)
		work(2000000UL);
	return 0;
}
