// A signal handler that spins while it interrupts a chain: main ->
// chain_a -> chain_b (spinning), and every 10 ms SIGALRM runs on_signal,
// which spins about 6 ms in sig_spin. The stack of a sample in the
// handler goes on through the kernel's signal frame (__restore_rt) to
// chain_b, chain_a and main. Runs argv[1] seconds.
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

volatile unsigned long sink;
volatile int done;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void sig_spin(double until)
{
	unsigned long acc = sink;
	while (now() < until) {
		for (int i = 0; i < 1000; i++) {
			acc = acc * 6364136223846793005UL + 1;
			__asm__ volatile("" : "+r"(acc));
		}
	}
	sink = acc;
}

__attribute__((noinline)) void on_signal(int sig)
{
	(void)sig;
	sig_spin(now() + 0.006);
	__asm__ volatile("");
}

__attribute__((noinline)) void chain_b(double end)
{
	unsigned long acc = sink;
	while (now() < end) {
		acc = acc * 6364136223846793005UL + 1;
		__asm__ volatile("" : "+r"(acc));
	}
	sink = acc;
	__asm__ volatile("");
}

__attribute__((noinline)) void chain_a(double end)
{
	chain_b(end);
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10;
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {{0, 10000}, {0, 10000}};
	setitimer(ITIMER_REAL, &it, NULL);
	chain_a(now() + secs);
	return 0;
}
