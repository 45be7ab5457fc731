//go:build ignore

// gogc.go: main.main builds a heap of a million linked objects and then
// collects it with runtime.GC in a loop, so most samples land in the
// mark workers: runtime.gcBgMarkWorker runs its drain through
// runtime.systemstack, on the g0 stack, where the window copied from sp
// does not hold the goroutine's frames. Runs os.Args[1] seconds (a
// float).
package main

import (
	"os"
	"runtime"
	"strconv"
	"time"
)

type node struct {
	next *node
	pad  [5]uintptr
}

var live []*node

//go:noinline
func buildHeap(n int) {
	live = make([]*node, n)
	for i := range live {
		live[i] = &node{}
		if i > 0 {
			live[i].next = live[i-1]
		}
	}
}

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	buildHeap(1 << 20)
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		runtime.GC()
	}
}
