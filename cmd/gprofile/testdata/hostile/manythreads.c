// Test workload with very many threads: argv[1] threads (default 10000)
// in all, of which argv[2] (default 2) spin in mt_outer -> mt_spin and the
// rest sleep in pause(). Sleepers get 16 KiB stacks so that 10,000 of
// them start in well under a second and take little memory. Runs argv[3]
// seconds (default 30). Prints "pid=N threads=N" once every thread runs.
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;
static time_t end_time;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int started;

static void count_in(void)
{
	pthread_mutex_lock(&mu);
	started++;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

__attribute__((noinline)) void mt_consume(unsigned long v)
{
	sink = v;
	__asm__ volatile("");
}

__attribute__((noinline)) void mt_spin(void)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < 2000000UL; i++) {
		acc = acc * 6364136223846793005UL + 1;
		__asm__ volatile("" : "+r"(acc));
	}
	mt_consume(acc);
	__asm__ volatile("");
}

__attribute__((noinline)) void *mt_outer(void *arg)
{
	(void)arg;
	count_in();
	while (time(NULL) < end_time)
		mt_spin();
	return NULL;
}

static void *sleeper(void *arg)
{
	(void)arg;
	count_in();
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 10000;
	int spinners = argc > 2 ? atoi(argv[2]) : 2;
	end_time = time(NULL) + (argc > 3 ? atoi(argv[3]) : 30);
	pthread_attr_t small, big;
	pthread_attr_init(&small);
	pthread_attr_init(&big);
	size_t stack = 16384 < PTHREAD_STACK_MIN ? PTHREAD_STACK_MIN : 16384;
	if (pthread_attr_setstacksize(&small, stack) || pthread_attr_setstacksize(&big, 256 * 1024)) {
		fprintf(stderr, "pthread_attr_setstacksize failed\n");
		return 1;
	}
	pthread_attr_setdetachstate(&small, PTHREAD_CREATE_DETACHED);
	pthread_attr_setdetachstate(&big, PTHREAD_CREATE_DETACHED);
	for (int i = 0; i < n; i++) {
		pthread_t t;
		int err = pthread_create(&t, i < spinners ? &big : &small, i < spinners ? mt_outer : sleeper, NULL);
		if (err) {
			fprintf(stderr, "pthread_create %d of %d: error %d\n", i + 1, n, err);
			return 1;
		}
	}
	pthread_mutex_lock(&mu);
	while (started < n)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	printf("pid=%d threads=%d\n", getpid(), n + 1);
	fflush(stdout);
	while (time(NULL) < end_time)
		sleep(1);
	return 0;
}
