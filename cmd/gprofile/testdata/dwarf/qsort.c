// A comparator called back from libc's qsort (Debian's libc has no frame
// pointers): main -> sort_loop -> qsort (libc) -> cmp_slow, where
// cmp_slow does the work. Runs argv[1] seconds.
#include <stdlib.h>
#include <time.h>

#define N 4096

static unsigned long data[N];
volatile unsigned long sink;

__attribute__((noinline)) int cmp_slow(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
	for (int i = 0; i < 200; i++) {
		x = x * 6364136223846793005UL + 1;
		__asm__ volatile("" : "+r"(x));
	}
	sink = x;
	return (*(const unsigned long *)a > y) - (*(const unsigned long *)a < y);
}

__attribute__((noinline)) void sort_loop(unsigned seed)
{
	for (int i = 0; i < N; i++)
		data[i] = (unsigned long)rand_r(&seed) << 16 ^ i;
	qsort(data, N, sizeof(data[0]), cmp_slow);
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10;
	struct timespec t0, t;
	unsigned seed = 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sort_loop(seed++);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return 0;
}
