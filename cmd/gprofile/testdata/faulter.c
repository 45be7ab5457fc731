// Test workload: maps fresh anonymous memory and touches every page in
// main -> faulter_loop -> faulter_touch, so page-faults fire there. Runs
// argv[1] seconds.
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define SIZE (16 << 20)

__attribute__((noinline)) void faulter_touch(volatile char *p)
{
	for (long i = 0; i < SIZE; i += 4096)
		p[i] = 1;
	__asm__ volatile("");
}

__attribute__((noinline)) void faulter_loop(time_t end)
{
	while (time(NULL) < end) {
		char *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			exit(1);
		faulter_touch(p);
		munmap(p, SIZE);
	}
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	faulter_loop(time(NULL) + (argc > 1 ? atoi(argv[1]) : 30));
	return 0;
}
