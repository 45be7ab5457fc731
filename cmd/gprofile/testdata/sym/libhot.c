// libhot.c: the shared library that dlopen_main.c loads.
volatile unsigned long hot_sink;

__attribute__((noinline)) void hot_consume(unsigned long v)
{
	hot_sink = v;
	__asm__ volatile("");
}

__attribute__((noinline)) void hot_inner(unsigned long n)
{
	unsigned long acc = hot_sink;
	for (unsigned long i = 0; i < n; i++) {
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(acc));
	}
	hot_consume(acc);
	__asm__ volatile("");
}

__attribute__((visibility("default"))) void hot_entry(unsigned long n)
{
	hot_inner(n);
	__asm__ volatile("");
}
