// usdt: two USDT probes with semaphores, for internal/probe's tests
// (with _SDT_HAS_SEMAPHORES every probe has one: provider_name_semaphore).
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

unsigned short app_plain_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short app_withsem_semaphore __attribute__((unused)) __attribute__((section(".probes")));

__attribute__((noinline)) void f(int i)
{
	DTRACE_PROBE1(app, plain, i);
	DTRACE_PROBE2(app, withsem, i, i + 1);
}

int main(void)
{
	f(1);
	return 0;
}
