// Test workload: sleeps 1 ms at a time in main -> sleeper_loop ->
// sleeper_nap, so sched:sched_switch fires with that user chain under the
// kernel's scheduling path. Runs argv[1] seconds.
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) void sleeper_nap(void)
{
	struct timespec ts = {0, 1000000};
	nanosleep(&ts, NULL);
	__asm__ volatile("");
}

__attribute__((noinline)) void sleeper_loop(time_t end)
{
	while (time(NULL) < end)
		sleeper_nap();
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	sleeper_loop(time(NULL) + (argc > 1 ? atoi(argv[1]) : 30));
	return 0;
}
