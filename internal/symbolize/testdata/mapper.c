// mapper.c maps part of a file executable, many times: mapper FILE OFFSET
// LENGTH COUNT maps LENGTH bytes of FILE from OFFSET (a multiple of the
// page size) with PROT_READ|PROT_EXEC, COUNT times, a page apart so that
// the kernel keeps them as separate mappings, prints each address in hex
// on a line, then "ready", and waits until its standard input closes.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	int fd = open(argv[1], O_RDONLY);
	if (fd < 0) {
		perror("open");
		return 1;
	}
	long page = sysconf(_SC_PAGESIZE);
	off_t off = strtoll(argv[2], NULL, 0);
	size_t len = strtoull(argv[3], NULL, 0);
	long count = strtol(argv[4], NULL, 0);
	size_t span = (len + page - 1) / page * page + page;
	char *area = mmap(NULL, span * count, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (long i = 0; i < count; i++) {
		char *p = mmap(area + i * span, len, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, off);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		printf("%lx\n", (unsigned long)p);
	}
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
