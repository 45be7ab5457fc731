// The chain workload in C++ (built with -fomit-frame-pointer): main ->
// chain::a -> chain::b -> chain::c, where c spins. Runs argv[1] seconds.
#include <chrono>
#include <cstdlib>

volatile unsigned long sink;

namespace chain {
__attribute__((noinline)) void c(unsigned long n)
{
	unsigned long acc = sink;
	for (unsigned long i = 0; i < n; i++) {
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(acc));
	}
	sink = acc;
}

__attribute__((noinline)) void b(unsigned long n)
{
	c(n);
	__asm__ volatile("");
}

__attribute__((noinline)) void a(unsigned long n)
{
	b(n);
	__asm__ volatile("");
}
} // namespace chain

int main(int argc, char **argv)
{
	double secs = argc > 1 ? std::atof(argv[1]) : 10;
	auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
	while (std::chrono::steady_clock::now() < end)
		chain::a(2000000UL);
	return 0;
}
