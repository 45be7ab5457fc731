// Test workload with a known call chain: main -> chain_a -> chain_b ->
// chain_c, where chain_c spins. Every hot function calls another (none is
// a leaf), so gcc -fno-omit-frame-pointer keeps each one's frame and
// frame-pointer unwinding sees the whole chain (gcc omits the frame
// pointer in leaf functions). Prints "pid=N", runs argv[1] seconds (a float).
// The clock is read every 8th chain, so that few samples land in the vDSO,
// whose internal helpers have no symbol (its image has only .dynsym).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

__attribute__((noinline)) void chain_consume(unsigned long v)
{
	sink = v;
	__asm__ volatile("");
}

__attribute__((noinline)) void chain_c(unsigned long n)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < n; i++) {
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(acc));
	}
	chain_consume(acc);
	__asm__ volatile(""); // no tail call
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

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double end = now() + (argc > 1 ? atof(argv[1]) : 30);
	printf("pid=%d\n", getpid());
	fflush(stdout);
	for (unsigned long i = 0; i % 8 != 0 || now() < end; i++)
		chain_a(2000000UL);
	return 0;
}
