//go:build ignore

// gocthread.go: a Go program (cgo) whose C code starts a thread of its
// own with pthread_create: c_thread -> c_mid -> c_leaf, built with frame
// pointers, spins there while main waits in pthread_join. The thread's
// frame-pointer chain ends (a saved rbp of 0) under start_thread, whose
// frames and clone3's lie above it. Runs os.Args[1] seconds (a float).
// Needs cgo (a C compiler).
package main

/*
#cgo CFLAGS: -O2 -g -fno-omit-frame-pointer
#include <pthread.h>
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

static void run(double d) {
	secs = d;
	if (pthread_create(&th, 0, c_thread, 0) == 0)
		pthread_join(th, 0);
}
*/
import "C"

import (
	"os"
	"strconv"
)

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	C.run(C.double(secs))
}
