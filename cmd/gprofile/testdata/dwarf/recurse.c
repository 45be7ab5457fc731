// Recursion 300 deep: main -> recurse(300) -> ... -> recurse(1) ->
// rec_leaf, which spins: past perf_event_max_stack (127) for a
// frame-pointer walk. Each level does work after its call (no tail
// call, no loop). Runs argv[1] seconds.
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) unsigned long rec_leaf(unsigned long n)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < n; i++) {
		acc = acc * 6364136223846793005UL + 1;
		__asm__ volatile("" : "+r"(acc));
	}
	return acc;
}

__attribute__((noinline)) unsigned long recurse(int depth, unsigned long n)
{
	unsigned long v = depth <= 1 ? rec_leaf(n) : recurse(depth - 1, n);
	__asm__ volatile("" : "+r"(v));
	return v ^ (unsigned long)depth;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sink = recurse(300, 2000000UL);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return 0;
}
