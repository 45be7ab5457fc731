// short.c: a short-lived workload: short_a -> short_b -> short_c spins
// for argv[1] seconds (a float, such as 0.3) and exits.
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void short_consume(unsigned long v)
{
	sink = v;
	__asm__ volatile("");
}

__attribute__((noinline)) void short_c(unsigned long n)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < n; i++) {
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(acc));
	}
	short_consume(acc);
	__asm__ volatile("");
}

__attribute__((noinline)) void short_b(unsigned long n)
{
	short_c(n);
	__asm__ volatile("");
}

__attribute__((noinline)) void short_a(unsigned long n)
{
	short_b(n);
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	double end = now() + (argc > 1 ? atof(argv[1]) : 0.3);
	while (now() < end)
		short_a(200000UL);
	return 0;
}
