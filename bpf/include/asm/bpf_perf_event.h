#include <asm-generic/bpf_perf_event.h>
