// A workload for the sampler test: spins in a known call chain
// main -> spin_outer -> spin_inner until killed or argv[1] seconds pass.
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) void spin_inner(void)
{
	for (int i = 0; i < 1000000; i++)
		sink += i;
}

__attribute__((noinline)) void spin_outer(void)
{
	spin_inner();
	sink++;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 30;
	time_t end = time(NULL) + secs;
	while (time(NULL) < end)
		spin_outer();
	return 0;
}
