//go:build ignore

// goleaf.go: main.main -> main.outer -> main.middle -> main.leaf, where
// leaf spins without calling anything: Go gives such a leaf no frame
// (no frame pointer saved), so a frame-pointer walk from it skips
// main.middle. Runs os.Args[1] seconds (a float).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func leaf(n uint64) uint64 {
	acc := sink
	for i := uint64(0); i < n; i++ {
		acc = acc*6364136223846793005 + i
	}
	return acc
}

//go:noinline
func middle(n uint64) uint64 { return leaf(n) ^ 3 }

//go:noinline
func outer(n uint64) uint64 { return middle(n) ^ 5 }

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		sink ^= outer(2_000_000)
	}
}
