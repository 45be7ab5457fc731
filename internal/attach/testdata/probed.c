// probed: a workload for the probe tests. It reads one line from stdin
// (so that the test can attach first), then, by argv[1]:
//   open N    opens and closes /dev/null N times from open_files
//   call N    calls probed() N times from loop()
//   malloc N  calls malloc N times from loop_malloc()
//   usdt N    fires the USDT probe gprofile:tick N times
//   fork N M  calls probed() N times, then forks a child that calls it
//             M times and fires gprofile:tick M times, and waits for it
//   timed N   calls probed() N times from loop() and prints the ns a
//             call took on average: "ns 12.5" (BenchmarkProbeHit)
//   sem       prints the USDT semaphore ("sem 0", "sem 1") each time it
//             changes, until stdin closes
// and prints "done". It prints "ready" once it waits for stdin.
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

unsigned short gprofile_tick_semaphore __attribute__((unused)) __attribute__((section(".probes")));

volatile unsigned long sink;

__attribute__((noinline)) void probed(int i) { sink += i; }

__attribute__((noinline)) void loop(int n)
{
	for (int i = 0; i < n; i++)
		probed(i);
}

__attribute__((noinline)) void open_files(int n)
{
	for (int i = 0; i < n; i++) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd >= 0)
			close(fd);
	}
}

__attribute__((noinline)) void loop_malloc(int n)
{
	for (int i = 0; i < n; i++) {
		void *p = malloc(64 + (i & 7));
		sink += (unsigned long)p;
		free(p);
	}
}

__attribute__((noinline)) void ticks(int n)
{
	for (int i = 0; i < n; i++)
		DTRACE_PROBE1(gprofile, tick, i);
}

static void watch_semaphore(void)
{
	int last = -1;
	for (;;) {
		int v = gprofile_tick_semaphore;
		if (v != last) {
			printf("sem %d\n", v);
			fflush(stdout);
			last = v;
		}
		struct pollfd p = {0, POLLIN, 0};
		if (poll(&p, 1, 10) > 0) {
			char c;
			if (read(0, &c, 1) <= 0)
				return;
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	int n = argc > 2 ? atoi(argv[2]) : 0;
	if (strcmp(argv[1], "sem") == 0) {
		watch_semaphore();
		return 0;
	}
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 3;
	if (strcmp(argv[1], "open") == 0)
		open_files(n);
	else if (strcmp(argv[1], "call") == 0)
		loop(n);
	else if (strcmp(argv[1], "timed") == 0) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		loop(n);
		clock_gettime(CLOCK_MONOTONIC, &b);
		double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
		printf("ns %.1f\n", n > 0 ? ns / n : 0);
	} else if (strcmp(argv[1], "malloc") == 0)
		loop_malloc(n);
	else if (strcmp(argv[1], "usdt") == 0)
		ticks(n);
	else if (strcmp(argv[1], "fork") == 0) {
		int m = argc > 3 ? atoi(argv[3]) : 0;
		loop(n);
		fflush(stdout);
		pid_t child = fork();
		if (child < 0)
			return 4;
		if (child == 0) {
			loop(m);
			ticks(m);
			_exit(0);
		}
		int status;
		if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return 5;
	}
	else
		return 2;
	printf("done\n");
	return 0;
}
