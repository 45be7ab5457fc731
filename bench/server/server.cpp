// bench/server/server.cpp: the C++ neighbour of bench's "real server"
// variant: std::map, std::string and std::sort in a call chain (libstdc++
// frames, templates to demangle), busy a fraction of one CPU (argv[1],
// 0..1, default 0.1) for argv[2] seconds (default 3600).
//
//   g++ -O2 -g -o server-cxx server.cpp
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace srv {
static volatile unsigned long sink;

__attribute__((noinline)) unsigned long index(std::map<std::string, int> &m, int i) {
	m["key-" + std::to_string(i % 997)] += i;
	return m.size();
}

__attribute__((noinline)) unsigned long sortSome(std::vector<int> &v, int i) {
	for (auto &x : v)
		x = (x * 1103515245 + i) & 0xffff;
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

__attribute__((noinline)) void request(std::map<std::string, int> &m, std::vector<int> &v, int i) {
	sink += index(m, i) + sortSome(v, i);
}
} // namespace srv

int main(int argc, char **argv) {
	using clock = std::chrono::steady_clock;
	double duty = argc > 1 ? atof(argv[1]) : 0.1;
	double secs = argc > 2 ? atof(argv[2]) : 3600;
	if (duty <= 0 || duty > 1)
		return 2;
	std::map<std::string, int> m;
	std::vector<int> v(256);
	auto slice = std::chrono::milliseconds(10);
	auto end = clock::now() + std::chrono::duration<double>(secs);
	for (int i = 0; clock::now() < end;) {
		auto t0 = clock::now();
		while (clock::now() - t0 < slice * duty)
			srv::request(m, v, i++);
		std::this_thread::sleep_for(slice * (1 - duty));
	}
	return 0;
}
