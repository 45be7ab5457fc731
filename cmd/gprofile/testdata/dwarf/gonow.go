//go:build ignore

// gonow.go: main.main -> main.nowOuter -> main.nowMid -> main.nowLeaf ->
// time.Now, called in a loop: Go's time.now switches to the g0 stack to
// call the vDSO's clock_gettime, so most samples land in the vDSO (or in
// time.now) on a stack that does not hold their callers, which are on
// the goroutine's. Runs os.Args[1] seconds (a float).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink int64

//go:noinline
func nowLeaf() int64 {
	var acc int64
	for i := 0; i < 1000; i++ {
		acc += time.Now().UnixNano() & 1
	}
	return acc
}

//go:noinline
func nowMid() int64 { return nowLeaf() ^ 3 }

//go:noinline
func nowOuter() int64 { return nowMid() ^ 5 }

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		sink ^= nowOuter()
	}
	println(sink)
}
