// A thread from pthread_create does the work: its stack's root is libc's
// clone3 -> start_thread (whose CFI marks the outermost frame), then
// worker -> thr_mid -> thr_spin. The main thread waits in pthread_join.
// Runs argv[1] seconds.
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;
static double secs = 10;

__attribute__((noinline)) void thr_spin(unsigned long n)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < n; i++) {
		acc = acc * 6364136223846793005UL + 1;
		__asm__ volatile("" : "+r"(acc));
	}
	sink = acc;
}

__attribute__((noinline)) void thr_mid(unsigned long n)
{
	thr_spin(n);
	__asm__ volatile("");
}

static void *worker(void *arg)
{
	(void)arg;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		thr_mid(2000000UL);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		secs = atof(argv[1]);
	pthread_t th;
	pthread_create(&th, NULL, worker, NULL);
	pthread_join(th, NULL);
	return 0;
}
