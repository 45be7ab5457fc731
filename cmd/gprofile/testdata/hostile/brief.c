// Test workload for a process that exits while it is profiled: waits for
// one byte on stdin (so the profiler can start first), then spins
// brief_outer -> brief_spin for argv[1] milliseconds (default 500) and
// exits. Prints "pid=N" at start.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

__attribute__((noinline)) void brief_consume(unsigned long v)
{
	sink = v;
	__asm__ volatile("");
}

// Not a leaf (it calls brief_consume), so gcc keeps its frame pointer.
__attribute__((noinline)) void brief_spin(void)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < 200000UL; i++) {
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(acc));
	}
	brief_consume(acc);
	__asm__ volatile("");
}

__attribute__((noinline)) void brief_outer(long ms)
{
	long end = now_ms() + ms;
	while (now_ms() < end)
		brief_spin();
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	long ms = argc > 1 ? atol(argv[1]) : 500;
	char c;
	printf("pid=%d\n", getpid());
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return 1;
	brief_outer(ms);
	return 0;
}
