// Test workload with very many mappings: maps the first page of the file
// argv[1] argv[2] times (default 5000), executable (PROT_READ|PROT_EXEC),
// each one page apart from the next with an inaccessible page between,
// so the kernel cannot merge them into one mapping. Then spins in
// maps_outer -> maps_spin for argv[3] seconds (default 30). Prints
// "pid=N maps=N" once mapped.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

__attribute__((noinline)) void maps_consume(unsigned long v)
{
	sink = v;
	__asm__ volatile("");
}

__attribute__((noinline)) void maps_spin(void)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < 2000000UL; i++) {
		acc = acc * 6364136223846793005UL + 1;
		__asm__ volatile("" : "+r"(acc));
	}
	maps_consume(acc);
	__asm__ volatile("");
}

__attribute__((noinline)) void maps_outer(time_t end)
{
	while (time(NULL) < end)
		maps_spin();
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: manymaps FILE [N] [SECONDS]\n");
		return 2;
	}
	int n = argc > 2 ? atoi(argv[2]) : 5000;
	time_t end = time(NULL) + (argc > 3 ? atoi(argv[3]) : 30);
	long page = sysconf(_SC_PAGESIZE);
	int fd = open(argv[1], O_RDONLY);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	char *base = mmap(NULL, 2 * n * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		perror("mmap reserve");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		if (mmap(base + 2 * i * page, page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
	}
	printf("pid=%d maps=%d\n", getpid(), n);
	fflush(stdout);
	maps_outer(end);
	return 0;
}
