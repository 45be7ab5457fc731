// Test workload: two threads spinning in different chains,
// thread_a_outer -> thread_a_spin and thread_b_outer -> thread_b_spin.
// Prints "pid=N tid_a=N tid_b=N", runs argv[1] seconds.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;
static volatile pid_t tids[2];
static time_t end_time;

__attribute__((noinline)) void consume(unsigned long v)
{
	sink = v;
	__asm__ volatile("");
}

#define SPIN(name)                                                      \
	__attribute__((noinline)) void name(void)                       \
	{                                                               \
		unsigned long acc = sink;                               \
		for (unsigned long i = 0; i < 2000000UL; i++) {         \
			acc = acc * 6364136223846793005UL + 1;          \
			__asm__ volatile("" : "+r"(acc));               \
		}                                                       \
		consume(acc);                                           \
		__asm__ volatile("");                                   \
	}
SPIN(thread_a_spin)
SPIN(thread_b_spin)

__attribute__((noinline)) void *thread_a_outer(void *arg)
{
	(void)arg;
	tids[0] = gettid();
	while (time(NULL) < end_time)
		thread_a_spin();
	return NULL;
}

__attribute__((noinline)) void *thread_b_outer(void *arg)
{
	(void)arg;
	tids[1] = gettid();
	while (time(NULL) < end_time)
		thread_b_spin();
	return NULL;
}

int main(int argc, char **argv)
{
	end_time = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	pthread_t a, b;
	pthread_create(&a, NULL, thread_a_outer, NULL);
	pthread_create(&b, NULL, thread_b_outer, NULL);
	while (!tids[0] || !tids[1])
		usleep(1000);
	printf("pid=%d tid_a=%d tid_b=%d\n", getpid(), tids[0], tids[1]);
	fflush(stdout);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	return 0;
}
