// offcpu: workloads that block in known places, for the off-CPU tests.
//
//	offcpu alternate SECONDS  50 ms spinning in spin_outer/spin_inner, then
//	                          50 ms of nanosleep in sleep_outer/sleep_inner
//	offcpu mutex SECONDS      a thread holds a mutex 20 ms at a time
//	                          (holder); another waits for it in lock_waiter
//	offcpu pipe SECONDS       pipe_reader reads a pipe that pipe_writer fills
//	                          with one byte every 10 ms
//	offcpu futex SECONDS      two threads ping-pong on a futex (futex_ping,
//	                          futex_pong) while main moves them between CPUs
//	offcpu sleep SECONDS      one nanosleep of SECONDS in long_sleep
//	offcpu churn SECONDS      forks children that sleep 2 ms and exit, as fast
//	                          as it can (pid reuse)
//
// It prints "ready" once its threads run. Built with -pthread.
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double deadline;
static volatile unsigned long sink;

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

__attribute__((noinline)) void spin_inner(double ms)
{
	double end = now() + ms / 1e3;
	while (now() < end)
		sink++;
}

__attribute__((noinline)) void spin_outer(double ms) { spin_inner(ms); __asm__ volatile(""); }

__attribute__((noinline)) void sleep_inner(long ms) { sleep_ms(ms); __asm__ volatile(""); }

__attribute__((noinline)) void sleep_outer(long ms) { sleep_inner(ms); __asm__ volatile(""); }

static void alternate(void)
{
	while (now() < deadline) {
		spin_outer(50);
		sleep_outer(50);
	}
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) void holder_hold(void) { sleep_ms(20); __asm__ volatile(""); }

static void *holder(void *arg)
{
	while (now() < deadline) {
		pthread_mutex_lock(&mu);
		holder_hold();
		pthread_mutex_unlock(&mu);
		sched_yield();
	}
	return NULL;
}

__attribute__((noinline)) void lock_waiter(void)
{
	pthread_mutex_lock(&mu);
	sink++;
	pthread_mutex_unlock(&mu);
	__asm__ volatile("");
}

static void *waiter(void *arg)
{
	while (now() < deadline) {
		lock_waiter();
		sleep_ms(1);
	}
	return NULL;
}

static int pipefd[2];

__attribute__((noinline)) void pipe_reader(void)
{
	char c;
	while (read(pipefd[0], &c, 1) == 1)
		sink++;
	__asm__ volatile("");
}

static void *writer(void *arg)
{
	while (now() < deadline) {
		sleep_ms(10);
		if (write(pipefd[1], "x", 1) != 1)
			break;
	}
	close(pipefd[1]);
	return NULL;
}

static atomic_int turn;

static void futex_wait(atomic_int *addr, int val)
{
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(atomic_int *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

// player waits for its turn (me), spins 1 ms, gives the turn over.
static void play(int me)
{
	while (now() < deadline) {
		int t;
		while ((t = atomic_load(&turn)) != me && t >= 0)
			futex_wait(&turn, t);
		if (t < 0)
			break;
		spin_inner(1);
		atomic_store(&turn, 1 - me);
		futex_wake(&turn);
	}
	atomic_store(&turn, -1);
	futex_wake(&turn);
}

__attribute__((noinline)) void futex_ping(void) { play(0); __asm__ volatile(""); }
__attribute__((noinline)) void futex_pong(void) { play(1); __asm__ volatile(""); }

static void *ping(void *arg) { futex_ping(); return NULL; }
static void *pong(void *arg) { futex_pong(); return NULL; }

static atomic_int tids[2];

static void *ping_named(void *arg)
{
	tids[0] = syscall(SYS_gettid);
	return ping(arg);
}

static void *pong_named(void *arg)
{
	tids[1] = syscall(SYS_gettid);
	return pong(arg);
}

// migrate moves the two players between the CPUs every 3 ms.
static void migrate(void)
{
	int ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	for (int i = 0; now() < deadline; i++) {
		for (int k = 0; k < 2; k++) {
			cpu_set_t set;
			CPU_ZERO(&set);
			CPU_SET((i + k) % (ncpu > 0 ? ncpu : 1), &set);
			if (tids[k])
				sched_setaffinity(tids[k], sizeof(set), &set);
		}
		sleep_ms(3);
	}
}

__attribute__((noinline)) void long_sleep(long ms) { sleep_ms(ms); __asm__ volatile(""); }

__attribute__((noinline)) void churn_child(void) { sleep_ms(2); __asm__ volatile(""); }

static void churn(void)
{
	while (now() < deadline) {
		pid_t p = fork();
		if (p == 0) {
			churn_child();
			_exit(0);
		}
		if (p > 0)
			waitpid(p, NULL, 0);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: offcpu alternate|mutex|pipe|futex|sleep|churn SECONDS\n");
		return 2;
	}
	double secs = atof(argv[2]);
	deadline = now() + secs;
	const char *mode = argv[1];
	pthread_t a, b;
	if (strcmp(mode, "alternate") == 0) {
		puts("ready");
		fflush(stdout);
		alternate();
	} else if (strcmp(mode, "mutex") == 0) {
		pthread_create(&a, NULL, holder, NULL);
		pthread_create(&b, NULL, waiter, NULL);
		puts("ready");
		fflush(stdout);
		pthread_join(a, NULL);
		pthread_join(b, NULL);
	} else if (strcmp(mode, "pipe") == 0) {
		if (pipe(pipefd) != 0)
			return 1;
		pthread_create(&a, NULL, writer, NULL);
		puts("ready");
		fflush(stdout);
		pipe_reader();
		pthread_join(a, NULL);
	} else if (strcmp(mode, "futex") == 0) {
		pthread_create(&a, NULL, ping_named, NULL);
		pthread_create(&b, NULL, pong_named, NULL);
		puts("ready");
		fflush(stdout);
		migrate();
		pthread_join(a, NULL);
		pthread_join(b, NULL);
	} else if (strcmp(mode, "sleep") == 0) {
		puts("ready");
		fflush(stdout);
		long_sleep((long)(secs * 1000));
	} else if (strcmp(mode, "churn") == 0) {
		puts("ready");
		fflush(stdout);
		churn();
	} else {
		fprintf(stderr, "offcpu: unknown mode %s\n", mode);
		return 2;
	}
	return 0;
}
