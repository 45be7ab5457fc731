// Test workload for gprofile stat, deterministic in what it counts:
//   statwork touch N      touches N fresh anonymous pages (N page faults)
//   statwork fork K N     forks K children that each touch N pages
//   statwork sleep N      sleeps 1 ms N times (N context switches at least)
//   statwork spin N       N million iterations of a dependent loop (CPU time),
//                         then "statwork cpu-ms MS" on stderr: the CPU time the
//                         process spent in main (not before its exec: gprofile's
//                         child gate is a Go program)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void touch(long pages)
{
	char *p = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		exit(1);
	for (long i = 0; i < pages; i++)
		((volatile char *)p)[i * 4096] = 1;
}

static double cpu_ms(void)
{
	struct timespec cpu;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	return cpu.tv_sec * 1e3 + cpu.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	double start = cpu_ms();
	if (argc < 3)
		return 2;
	long n = atol(argv[argc - 1]);
	if (!strcmp(argv[1], "touch")) {
		touch(n);
	} else if (!strcmp(argv[1], "fork") && argc == 4) {
		int k = atoi(argv[2]);
		for (int i = 0; i < k; i++)
			if (fork() == 0) {
				touch(n);
				_exit(0);
			}
		while (wait(NULL) > 0)
			;
	} else if (!strcmp(argv[1], "sleep")) {
		struct timespec ts = {0, 1000000};
		for (long i = 0; i < n; i++)
			nanosleep(&ts, NULL);
	} else if (!strcmp(argv[1], "spin")) {
		volatile unsigned long x = 1;
		for (long i = 0; i < n * 1000000; i++)
			x = x * 6364136223846793005UL + 1;
		fprintf(stderr, "statwork cpu-ms %.3f\n", cpu_ms() - start);
	} else {
		return 2;
	}
	return 0;
}
