// inline.c is the workload binary of the line and inlining tests: work
// calls two levels of always-inlined helpers; plain inlines nothing.
#include <stdio.h>

static inline __attribute__((always_inline)) int square_plus(int x) {
	int y = x * x;
	return y + 3;
}

static inline __attribute__((always_inline)) int sum_squares(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += square_plus(i ^ n);
	return s;
}

__attribute__((noinline)) int work(int n) {
	int r = sum_squares(n);
	return r * 7 + n;
}

__attribute__((noinline)) int plain(int x) {
	volatile int v = x;
	v = v * 31 + 1;
	return v;
}

int main(int argc, char **argv) {
	(void)argv;
	printf("%d %d\n", work(argc * 100), plain(argc));
	return 0;
}
