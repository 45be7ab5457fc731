// stackdump captures, in a hot leaf, its own registers and a copy of its
// stack from rsp up to the end of the stack's mapping, and writes them with
// /proc/self/maps to a file, so the unwinder can be tested offline without
// BPF. Usage: stackdump MODE OUTFILE, MODE one of qsort, qsort24, signal,
// recurse, thread, epilogue; or stackdump dlopen OUTFILE LIB (LIB: libchain.c built
// as a shared library). Built at test time (see stack_test.go), usually
// without frame pointers.
//
// File layout: "STKDUMP1", 17 little-endian u64 registers (DWARF x86-64
// numbering), u64 stack length, the stack bytes, then /proc/self/maps.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static struct {
	uint64_t regs[17];
	uint64_t len;
} cap;
static uint64_t stackbuf[1 << 17];
static uint64_t stack_end;
static volatile int captured;
static volatile uint64_t sink;

// CAPTURE stores rip, rsp, rbp, rbx and r12-r15 (DWARF numbering) into
// cap.regs, then copies the stack with volatile reads (no memcpy call: the
// function stays a leaf).
#define CAPTURE()                                                        \
	do {                                                             \
		__asm__ volatile("lea 0(%%rip), %%rax\n\t"               \
				 "mov %%rax, 128(%0)\n\t"                \
				 "mov %%rsp, 56(%0)\n\t"                 \
				 "mov %%rbp, 48(%0)\n\t"                 \
				 "mov %%rbx, 24(%0)\n\t"                 \
				 "mov %%r12, 96(%0)\n\t"                 \
				 "mov %%r13, 104(%0)\n\t"                \
				 "mov %%r14, 112(%0)\n\t"                \
				 "mov %%r15, 120(%0)\n\t"                \
				 :                                       \
				 : "r"(cap.regs)                         \
				 : "rax", "memory");                     \
		volatile uint64_t *src = (volatile uint64_t *)cap.regs[7]; \
		uint64_t n = (stack_end - cap.regs[7]) / 8;              \
		if (n > sizeof(stackbuf) / 8)                            \
			n = sizeof(stackbuf) / 8;                        \
		for (uint64_t i = 0; i < n; i++)                         \
			stackbuf[i] = src[i];                            \
		cap.len = n * 8;                                         \
		captured = 1;                                            \
	} while (0)

// epilogue: main -> run_epilogue -> epi_leaf, captured in epi_leaf's
// epilogue, after its pop %rbp and before its ret, with the CFI GCC
// gives that point: the CFA is rsp+8 again, and rbp is still "saved at
// CFA-16", a slot below sp that the pop has freed (so below any window
// copied from sp). epi_leaf records the registers at epi_at, then calls
// epi_copy, which copies the stack as CAPTURE does.
uint64_t epi_regs[17];

void epi_copy(void) {
	memcpy(cap.regs, epi_regs, sizeof cap.regs);
	volatile uint64_t *src = (volatile uint64_t *)cap.regs[7];
	uint64_t n = (stack_end - cap.regs[7]) / 8;
	if (n > sizeof(stackbuf) / 8)
		n = sizeof(stackbuf) / 8;
	for (uint64_t i = 0; i < n; i++)
		stackbuf[i] = src[i];
	cap.len = n * 8;
	captured = 1;
}

void epi_leaf(void);
__asm__(".text\n"
	".globl epi_leaf\n"
	".type epi_leaf, @function\n"
	"epi_leaf:\n"
	".cfi_startproc\n"
	"push %rbp\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset %rbp, -16\n"
	"mov %rsp, %rbp\n"
	".cfi_def_cfa_register %rbp\n"
	"xor %eax, %eax\n"
	"pop %rbp\n"
	".cfi_def_cfa %rsp, 8\n"
	"epi_at:\n"
	"lea epi_at(%rip), %rax\n"
	"mov %rax, epi_regs+128(%rip)\n"
	"mov %rsp, epi_regs+56(%rip)\n"
	"mov %rbp, epi_regs+48(%rip)\n"
	"mov %rbx, epi_regs+24(%rip)\n"
	"mov %r12, epi_regs+96(%rip)\n"
	"mov %r13, epi_regs+104(%rip)\n"
	"mov %r14, epi_regs+112(%rip)\n"
	"mov %r15, epi_regs+120(%rip)\n"
	"sub $8, %rsp\n"
	".cfi_adjust_cfa_offset 8\n"
	"call epi_copy\n"
	"add $8, %rsp\n"
	".cfi_adjust_cfa_offset -8\n"
	"ret\n"
	".cfi_endproc\n"
	".size epi_leaf, .-epi_leaf\n");

__attribute__((noinline)) static void run_epilogue(void) {
	epi_leaf();
	sink += 4; // not a tail call
}

// find_stack_end sets stack_end to the end of the mapping holding addr.
static void find_stack_end(uint64_t addr) {
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= addr && addr < hi) {
			stack_end = hi;
			break;
		}
	}
	if (f)
		fclose(f);
	if (!stack_end) {
		fprintf(stderr, "no mapping holds the stack\n");
		exit(2);
	}
}

// qsort: main -> run_qsort -> qsort (libc) -> cmp_leaf.
__attribute__((noinline)) static int cmp_leaf(const void *a, const void *b) {
	int x = *(const int *)a, y = *(const int *)b;
	if (!captured && x == 7)
		CAPTURE();
	return (x > y) - (x < y);
}

__attribute__((noinline)) static void run_qsort(void) {
	int v[64];
	for (int i = 0; i < 64; i++)
		v[i] = (i * 37) % 64;
	qsort(v, 64, sizeof v[0], cmp_leaf);
	sink += v[3];
}

// qsort24: main -> qrec(13) -> ... -> qrec(0) -> run_qsort -> qsort -> cmp_leaf,
// about 24 frames (the benchmark's stack).
__attribute__((noinline)) static int qrec(int n) {
	if (n == 0) {
		run_qsort();
		return 0;
	}
	int r = qrec(n - 1);
	sink += r; // not a tail call
	return r + 1;
}

// dlopen: main -> run_dlopen -> lib_chain -> lib_mid (libchain.so, path in
// argv[3]) -> dl_leaf.
__attribute__((noinline)) static int dl_leaf(int n) {
	sink -= n;
	CAPTURE();
	return n + 1;
}

__attribute__((noinline)) static void run_dlopen(const char *lib) {
	void *h = dlopen(lib, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		exit(2);
	}
	int (*chain)(int (*)(int), int) = (int (*)(int (*)(int), int))dlsym(h, "lib_chain");
	if (!chain) {
		fprintf(stderr, "no lib_chain in %s\n", lib);
		exit(2);
	}
	sink += chain(dl_leaf, 3);
}

// signal: main -> sig_chain_a -> sig_chain_b (spins); SIGALRM interrupts
// it: handler -> handler_mid -> handler_leaf.
__attribute__((noinline)) static void handler_leaf(int n) {
	sink += n;
	if (!captured)
		CAPTURE();
}

__attribute__((noinline)) static void handler_mid(int n) {
	handler_leaf(n + 1);
	sink += 1;
}

static void handler(int sig) {
	handler_mid(sig);
	sink += 2;
}

__attribute__((noinline)) static void sig_chain_b(void) {
	while (!captured)
		sink++;
}

__attribute__((noinline)) static void sig_chain_a(void) {
	sig_chain_b();
	sink += 3;
}

__attribute__((noinline)) static void run_signal(void) {
	struct sigaction sa = {0};
	sa.sa_handler = handler;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {{0, 2000}, {0, 2000}};
	setitimer(ITIMER_REAL, &it, NULL);
	sig_chain_a();
	struct itimerval off = {0};
	setitimer(ITIMER_REAL, &off, NULL);
}

// recurse: main -> rec(300) -> ... -> rec(0) -> deep_leaf.
__attribute__((noinline)) static void deep_leaf(int n) {
	sink += n;
	CAPTURE();
}

__attribute__((noinline)) static int rec(int n) {
	if (n == 0) {
		deep_leaf(n);
		return 0;
	}
	int r = rec(n - 1);
	sink += r; // not a tail call
	return r + 1;
}

// thread: start_thread (libc) -> thread_main -> t_chain -> t_leaf.
__attribute__((noinline)) static void t_leaf(int n) {
	sink ^= n; // unlike deep_leaf, so GCC does not fold the two into one
	CAPTURE();
}

__attribute__((noinline)) static void t_chain(int n) {
	t_leaf(n * 2);
	sink += 1;
}

static void *thread_main(void *arg) {
	int here;
	find_stack_end((uint64_t)&here);
	t_chain((int)(intptr_t)arg);
	return NULL;
}

static void dump(const char *path) {
	FILE *out = fopen(path, "w");
	if (!out) {
		perror(path);
		exit(2);
	}
	fwrite("STKDUMP1", 1, 8, out);
	fwrite(cap.regs, 8, 17, out);
	fwrite(&cap.len, 8, 1, out);
	fwrite(stackbuf, 1, cap.len, out);
	FILE *maps = fopen("/proc/self/maps", "r");
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, maps)) > 0)
		fwrite(buf, 1, n, out);
	fclose(maps);
	if (fclose(out) != 0) {
		perror(path);
		exit(2);
	}
}

int main(int argc, char **argv) {
	if (argc != 3 && !(argc == 4 && strcmp(argv[1], "dlopen") == 0)) {
		fprintf(stderr, "usage: stackdump qsort|qsort24|signal|recurse|thread|epilogue OUTFILE | dlopen OUTFILE LIB\n");
		return 2;
	}
	int here;
	const char *mode = argv[1];
	if (strcmp(mode, "thread") == 0) {
		pthread_t t;
		pthread_create(&t, NULL, thread_main, (void *)(intptr_t)argc);
		pthread_join(t, NULL);
	} else {
		find_stack_end((uint64_t)&here);
		if (strcmp(mode, "qsort") == 0)
			run_qsort();
		else if (strcmp(mode, "qsort24") == 0)
			sink += qrec(13);
		else if (strcmp(mode, "signal") == 0)
			run_signal();
		else if (strcmp(mode, "dlopen") == 0)
			run_dlopen(argv[3]);
		else if (strcmp(mode, "recurse") == 0)
			sink += rec(300);
		else if (strcmp(mode, "epilogue") == 0)
			run_epilogue();
		else {
			fprintf(stderr, "unknown mode %s\n", mode);
			return 2;
		}
	}
	if (!captured) {
		fprintf(stderr, "%s: the leaf never ran\n", mode);
		return 1;
	}
	dump(argv[2]);
	return 0;
}
