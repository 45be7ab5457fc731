//go:build ignore

// gocthread.go: a Go program (cgo) whose C code starts a thread of its
// own with pthread_create: c_thread -> c_mid -> c_leaf, built with frame
// pointers, spins there while main waits in pthread_join. The thread's
// frame-pointer chain ends (a saved rbp of 0) under start_thread, whose
// frames and clone3's lie above it, and readable memory above those.
// Spins in Go for 0.3 s first, then runs the thread os.Args[1] seconds
// (a float).
// Needs cgo (a C compiler).
package main

/*
#cgo CFLAGS: -O2 -g -fno-omit-frame-pointer
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void c_leaf(void) {
	for (int i = 0; i < 100000; i++)
		sink += i;
}

__attribute__((noinline)) static void c_mid(void) { c_leaf(); sink++; }

static double secs;
static pthread_t th;

static void *c_thread(void *arg) {
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		c_mid();
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 > secs)
			return 0;
	}
}

// The thread's stack is the lower half of a mapping whose upper half is
// written (readable), as when another mapping lies right above a
// thread's stack: a copy from its sp does not stop at an unreadable page
// there.
static void run(double d) {
	secs = d;
	size_t n = 1 << 20;
	char *m = mmap(0, 2 * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	pthread_attr_t a;
	pthread_attr_init(&a);
	if (m != MAP_FAILED) {
		memset(m + n, 1, n);
		pthread_attr_setstack(&a, m, n);
	}
	if (pthread_create(&th, &a, c_thread, 0) == 0)
		pthread_join(th, 0);
}
*/
import "C"

import (
	"os"
	"strconv"
	"time"
)

// goSpin runs Go code for d seconds first: the process is listed for
// stack switches (switch_tgids) long before its C thread starts, whose
// chain end must then not end its window.
//
//go:noinline
func goSpin(d float64) {
	start := time.Now()
	for time.Since(start).Seconds() < d {
		for i := 0; i < 100000; i++ {
			sink += i
		}
	}
}

var sink int

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	goSpin(0.3)
	C.run(C.double(secs))
}
