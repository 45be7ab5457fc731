// dlopen_main.c: loads argv[1] (libhot.so) with dlopen after start and
// calls its hot_entry for argv[2] seconds (a float): gprofile must name
// the library's functions, mapped after the process was first seen.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	double end = now() + atof(argv[2]);
	// Spin a little first, so that the process is seen before dlopen.
	while (now() < end - atof(argv[2]) * 0.9)
		;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void (*entry)(unsigned long) = (void (*)(unsigned long))dlsym(h, "hot_entry");
	if (!entry)
		return 1;
	while (now() < end)
		entry(2000000UL);
	return 0;
}
