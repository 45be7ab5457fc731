//go:build ignore

// gocgo.go: main.main -> main.cgoMid -> main.cgoLeaf -> C's c_outer
// (through cgo: runtime.cgocall, runtime.asmcgocall, which runs C code on
// the g0 stack), where C spins. The C code sets up no frame pointer of
// its own: rbp keeps the Go caller's, on the goroutine's stack. Runs
// os.Args[1] seconds (a float). Needs cgo (a C compiler).
package main

/*
static unsigned long spin(unsigned long n) {
	unsigned long acc = 0;
	for (unsigned long i = 0; i < n; i++)
		acc = acc * 6364136223846793005UL + i;
	return acc;
}
__attribute__((noinline)) unsigned long c_outer(unsigned long n) { return spin(n) ^ 7; }
*/
import "C"

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func cgoLeaf() uint64 { return uint64(C.c_outer(2000000)) }

//go:noinline
func cgoMid() uint64 { return cgoLeaf() ^ 3 }

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		sink ^= cgoMid()
	}
	println(sink)
}
