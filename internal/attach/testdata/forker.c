// A workload for the fork-following test: once a line arrives on stdin
// (the sampler runs), it starts a thread that spins for half a second,
// forks a child that execs argv[1] with the rest of argv, prints
// "child=PID", and waits for both.
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *spin_thread(void *arg)
{
	double end = now() + 0.5;
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			sink += i;
	return arg;
}

int main(int argc, char **argv)
{
	char line[16];
	if (argc < 2 || !fgets(line, sizeof(line), stdin))
		return 2;
	pthread_t th;
	if (pthread_create(&th, NULL, spin_thread, NULL) != 0)
		return 1;
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		execv(argv[1], argv + 1);
		_exit(127);
	}
	printf("child=%d\n", pid);
	fflush(stdout);
	pthread_join(th, NULL);
	int status;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
