// exceptions.cpp is a small C++ program with exceptions, destructors and
// frames of several shapes, built at test time so its .eh_frame (CIEs with
// the "zPLR" augmentation: personality routine, LSDA) can be compared with
// readelf.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

struct Guard {
	std::string name;
	explicit Guard(std::string n) : name(std::move(n)) {}
	~Guard() { std::printf("leave %s\n", name.c_str()); }
};

__attribute__((noinline)) int thrower(int n) {
	Guard g("thrower");
	if (n > 2)
		throw std::runtime_error("too big: " + std::to_string(n));
	return n * 2;
}

__attribute__((noinline)) int middle(std::vector<int> &v, int n) {
	Guard g("middle");
	int sum = 0;
	for (int i = 0; i < n; i++) {
		v.push_back(thrower(i));
		sum += v.back();
	}
	return sum;
}

int main(int argc, char **) {
	std::vector<int> v;
	try {
		return middle(v, argc + 3);
	} catch (const std::exception &e) {
		std::printf("caught %s after %zu\n", e.what(), v.size());
	}
	return 0;
}
