// kcost: what the machine charges for the kernel entries a profiler's
// reader makes, printed as one line for bench/run.sh's report: a system
// call (getppid), a first-touch page fault of anonymous memory, the CPU
// time of a 20 µs nanosleep (Go's sysmon sleeps so), and a round trip
// between two threads over pipes (two wake-ups, two context switches).
// A virtual machine whose hypervisor traps these (a PVM guest, page
// table isolation) charges several times what bare metal does, which
// moves gprofile's cost against perf's (BENCHMARKS.md, issue 16 session
// 18). Build: cc -O2 -pthread -o kcost kcost.c.
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(clockid_t c) {
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int ping[2], pong[2];

static void *echo(void *arg) {
	char c;
	for (long i = 0; i < (long)arg; i++)
		if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
			break;
	return NULL;
}

int main(void) {
	const long calls = 200000, pages = 20000, sleeps = 2000, trips = 20000;
	double t = now(CLOCK_MONOTONIC);
	for (long i = 0; i < calls; i++)
		syscall(SYS_getppid);
	double sys_us = (now(CLOCK_MONOTONIC) - t) / calls * 1e6;

	long page = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("kcost: mmap");
		return 1;
	}
	t = now(CLOCK_MONOTONIC);
	for (long i = 0; i < pages; i++)
		m[i * page] = 1;
	double fault_us = (now(CLOCK_MONOTONIC) - t) / pages * 1e6;

	t = now(CLOCK_PROCESS_CPUTIME_ID);
	for (long i = 0; i < sleeps; i++) {
		struct timespec d = {0, 20000};
		nanosleep(&d, NULL);
	}
	double sleep_us = (now(CLOCK_PROCESS_CPUTIME_ID) - t) / sleeps * 1e6;

	pthread_t th;
	if (pipe(ping) || pipe(pong) || pthread_create(&th, NULL, echo, (void *)trips)) {
		perror("kcost: pipe, thread");
		return 1;
	}
	char c = 0;
	t = now(CLOCK_MONOTONIC);
	for (long i = 0; i < trips; i++)
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			break;
	double trip_us = (now(CLOCK_MONOTONIC) - t) / trips * 1e6;
	pthread_join(th, NULL);

	printf("system call %.2f µs, page fault %.2f µs, 20 µs nanosleep %.1f µs of CPU, thread round trip %.1f µs\n",
	       sys_us, fault_us, sleep_us, trip_us);
	return 0;
}
