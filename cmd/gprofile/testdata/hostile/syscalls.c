// Test workload that spends most of its time in the kernel:
// sys_outer -> sys_write_loop writes one byte to /dev/null at a time for
// argv[1] seconds (default 30). Prints "pid=N".
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) void sys_write_loop(int fd)
{
	char c = 'x';
	for (int i = 0; i < 10000; i++)
		if (write(fd, &c, 1) != 1)
			exit(1);
	__asm__ volatile("");
}

__attribute__((noinline)) void sys_outer(int fd, time_t end)
{
	while (time(NULL) < end)
		sys_write_loop(fd);
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	int fd = open("/dev/null", O_WRONLY);
	if (fd < 0)
		return 1;
	printf("pid=%d\n", getpid());
	fflush(stdout);
	sys_outer(fd, end);
	return 0;
}
