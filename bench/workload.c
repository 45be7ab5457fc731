// bench/workload.c: the CPU-bound workload the benchmark profiles.
//
// It runs one thread per CPU (or the number given) for a fixed number of
// seconds. Each thread repeatedly walks a fixed call chain 20 frames deep
// (chain20 -> chain19 -> ... -> chain1 -> leaf), where every chain frame
// does a little work before and after its call, so samples land at every
// depth and every frame is a non-leaf frame with a real return address.
// Built with -fno-omit-frame-pointer so frame-pointer unwinders (perf -g,
// bpf_get_stack) see the whole chain.
//
// At the end it prints one line on stdout:
//   iters=N seconds=S threads=T steal_sec=X slices=K slices_kept=J
//   iters_per_sec=R iters_per_sec_adj=A iters_per_sec_robust=B sink=0|1
// One iteration is one walk of the whole chain (all threads counted).
//   iters_per_sec        plain mean over the run.
//   iters_per_sec_adj    iters per CPU-second the guest had: steal_sec (the
//                        "steal" column of /proc/stat, all CPUs) taken out.
//   iters_per_sec_robust the main thread reads the counters every 100 ms;
//                        slices slower than 85% of the 90th-percentile
//                        slice are dropped as host contention (on a shared
//                        VM host it comes in bursts that halve the speed
//                        for a second or more, and is mostly not reported
//                        as steal). It also drops a profiler's own bursts
//                        of work, so bench/harness reports the plain rate
//                        of quiet rounds and keeps this one in its CSV.
//
//   cc -O2 -g -fno-omit-frame-pointer -pthread -o workload workload.c
//   ./workload [seconds=5] [threads=nproc]

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static atomic_int stop;

// work burns a few dozen cycles that the compiler cannot fold away.
static inline uint64_t work(uint64_t x, int n)
{
	for (int i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

NOINLINE uint64_t leaf(uint64_t x) { return work(x, 64); }

// Each chainN works, calls chainN-1, then works on the result, so the call
// is never a tail call and every chain frame stays on the stack.
#define CHAIN(n, prev)                                  \
	NOINLINE uint64_t chain##n(uint64_t x)          \
	{                                               \
		x = work(x + n, 8);                     \
		x = prev(x);                            \
		return work(x, 8) + n;                  \
	}

CHAIN(1, leaf)
CHAIN(2, chain1)
CHAIN(3, chain2)
CHAIN(4, chain3)
CHAIN(5, chain4)
CHAIN(6, chain5)
CHAIN(7, chain6)
CHAIN(8, chain7)
CHAIN(9, chain8)
CHAIN(10, chain9)
CHAIN(11, chain10)
CHAIN(12, chain11)
CHAIN(13, chain12)
CHAIN(14, chain13)
CHAIN(15, chain14)
CHAIN(16, chain15)
CHAIN(17, chain16)
CHAIN(18, chain17)
CHAIN(19, chain18)
CHAIN(20, chain19)

// Per-thread iteration counters, each on its own cache line; the main
// thread reads them every slice.
struct counter {
	_Alignas(64) atomic_uint_fast64_t iters;
	uint64_t sink;
};

NOINLINE static void *spin(void *arg)
{
	struct counter *c = arg;
	uint64_t x = (uintptr_t)arg | 1;
	uint64_t n = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		x = chain20(x);
		atomic_store_explicit(&c->iters, ++n, memory_order_relaxed);
	}
	c->sink = x;
	return NULL;
}

// steal_seconds returns the "steal" column of the "cpu" line of /proc/stat
// (all CPUs), in seconds; 0 when it cannot be read.
static double steal_seconds(void)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return 0;
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
		       &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	return n == 8 ? (double)v[7] / (double)sysconf(_SC_CLK_TCK) : 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t total_iters(struct counter *c, long threads)
{
	uint64_t sum = 0;
	for (long i = 0; i < threads; i++)
		sum += atomic_load_explicit(&c[i].iters, memory_order_relaxed);
	return sum;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

#define SLICE_SEC 0.1
#define MAX_SLICES 100000
#define KEEP_FRACTION 0.85

// robust_rate returns iterations per second over the slices whose rate is
// at least KEEP_FRACTION of the 90th-percentile slice rate, and stores how
// many slices it kept. Slower slices are taken to be the host's doing.
static double robust_rate(const double *iters, const double *secs, int n, int *kept)
{
	static double rates[MAX_SLICES], sorted[MAX_SLICES];
	for (int i = 0; i < n; i++)
		rates[i] = sorted[i] = iters[i] / secs[i];
	qsort(sorted, (size_t)n, sizeof(double), cmp_double);
	double p90 = sorted[(int)(0.9 * (n - 1))];
	double sum_iters = 0, sum_secs = 0;
	*kept = 0;
	for (int i = 0; i < n; i++) {
		if (rates[i] >= KEEP_FRACTION * p90) {
			sum_iters += iters[i];
			sum_secs += secs[i];
			(*kept)++;
		}
	}
	return sum_secs > 0 ? sum_iters / sum_secs : 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	long threads = argc > 2 ? atol(argv[2]) : sysconf(_SC_NPROCESSORS_ONLN);
	if (seconds <= 0 || seconds > 3600 || threads <= 0 || threads > 1024) {
		fprintf(stderr, "usage: workload [seconds 0..3600] [threads 1..1024]\n");
		return 2;
	}
	static pthread_t tids[1024];
	static struct counter counters[1024];
	static double slice_iters[MAX_SLICES], slice_secs[MAX_SLICES];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	double steal0 = steal_seconds();
	double start = now();
	for (long i = 0; i < threads; i++) {
		if (pthread_create(&tids[i], NULL, spin, &counters[i]) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	// Sample the counters every SLICE_SEC until the time is up.
	int nslices = 0;
	double last_t = start;
	uint64_t last_n = 0;
	for (;;) {
		double next = last_t + SLICE_SEC;
		double end = start + seconds;
		double until = next < end ? next : end;
		double wait = until - now();
		if (wait > 0) {
			struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
			nanosleep(&ts, NULL);
		}
		double t = now();
		uint64_t n = total_iters(counters, threads);
		if (nslices < MAX_SLICES && t > last_t) {
			slice_iters[nslices] = (double)(n - last_n);
			slice_secs[nslices] = t - last_t;
			nslices++;
		}
		last_t = t;
		last_n = n;
		if (t >= end)
			break;
	}
	atomic_store(&stop, 1);
	uint64_t sink = 0;
	for (long i = 0; i < threads; i++) {
		pthread_join(tids[i], NULL);
		sink ^= counters[i].sink;
	}
	double elapsed = last_t - start;
	double steal = steal_seconds() - steal0;
	double avail = (double)cpus * elapsed - steal;
	if (avail <= 0)
		avail = (double)cpus * elapsed;
	int kept = 0;
	double robust = robust_rate(slice_iters, slice_secs, nslices, &kept);
	printf("iters=%llu seconds=%.3f threads=%ld steal_sec=%.3f slices=%d slices_kept=%d "
	       "iters_per_sec=%.0f iters_per_sec_adj=%.0f iters_per_sec_robust=%.0f sink=%llu\n",
	       (unsigned long long)last_n, elapsed, threads, steal, nslices, kept,
	       (double)last_n / elapsed, (double)last_n / avail * (double)cpus, robust,
	       (unsigned long long)(sink & 1));
	return 0;
}
