//go:build ignore

// gowork.go: a hot loop three calls deep, built by the tests with and
// without the symbol table (-ldflags=-s -w): gprofile must show
// main.goOuter;main.goMid;main.goSpin from .gopclntab. Runs os.Args[1]
// seconds (a float).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

// goConsume keeps goSpin from being a leaf: Go saves no frame pointer
// in leaf functions without a frame, and frame-pointer unwinding would
// skip goSpin's caller.
//
//go:noinline
func goConsume(v uint64) uint64 { return v ^ sink }

//go:noinline
func goSpin(n uint64) uint64 {
	acc := sink
	for i := uint64(0); i < n; i++ {
		acc = acc*6364136223846793005 + i
	}
	return goConsume(acc)
}

//go:noinline
func goMid(n uint64) uint64 { return goSpin(n) ^ 3 }

//go:noinline
func goOuter(n uint64) uint64 { return goMid(n) ^ 5 }

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		sink ^= goOuter(2_000_000)
	}
}
