// cxx.cpp: a hot loop in a lambda called from a member function of a
// class template in a namespace, so that gprofile must demangle
// gprofile_test::Spinner<unsigned long>::run and its lambda. Runs argv[1]
// seconds (a float).
#include <cstdlib>
#include <ctime>

volatile unsigned long sink;

// Every hot function calls another: gcc keeps no frame pointer in leaf
// functions, and frame-pointer unwinding would skip their caller.
__attribute__((noinline)) void consume(unsigned long v)
{
	sink = v;
	__asm__ volatile("");
}

static double now()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

namespace gprofile_test {

template <typename T> struct Spinner {
	T seed;
	__attribute__((noinline)) T run(T n)
	{
		auto spin = [this](T count) __attribute__((noinline)) {
			T acc = seed;
			for (T i = 0; i < count; i++) {
				acc = acc * 6364136223846793005UL + 1442695040888963407UL;
				__asm__ volatile("" : "+r"(acc));
			}
			consume(acc);
			__asm__ volatile("");
			return acc;
		};
		T r = spin(n);
		__asm__ volatile(""); // no tail call
		return r;
	}
};

} // namespace gprofile_test

int main(int argc, char **argv)
{
	double end = now() + (argc > 1 ? atof(argv[1]) : 10);
	gprofile_test::Spinner<unsigned long> s{sink};
	while (now() < end)
		sink = s.run(2000000UL);
	return 0;
}
