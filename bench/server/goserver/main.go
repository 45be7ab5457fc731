// Command server is the Go neighbour of bench's "real server" variant: a
// Go binary built with its DWARF (go build's default) that keeps busy a
// fraction of one CPU (-duty, 0..1) in a few goroutines with their own
// call chains, maps and allocations, so a whole-system profiler meets
// .gopclntab, .debug_info and goroutine stacks as on a real server. It
// runs until killed or for -d seconds.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

var sink int

//go:noinline
func parse(s string) int {
	n := 0
	for _, f := range strings.Fields(s) {
		n += len(f)
	}
	return n
}

//go:noinline
func handle(m map[string]int, i int) {
	k := fmt.Sprintf("key-%d", i%512)
	m[k] += parse("GET /index.html HTTP/1.1 Host: example.org " + k)
}

//go:noinline
func serve(duty float64, stop <-chan struct{}) {
	m := map[string]int{}
	const slice = 10 * time.Millisecond
	for i := 0; ; {
		t0 := time.Now()
		for time.Since(t0) < time.Duration(duty*float64(slice)) {
			handle(m, i)
			i++
		}
		sink += len(m)
		select {
		case <-stop:
			return
		case <-time.After(time.Duration((1 - duty) * float64(slice))):
		}
	}
}

func main() {
	duty := flag.Float64("duty", 0.1, "share of one CPU to keep busy, 0..1")
	secs := flag.Float64("d", 3600, "seconds to run")
	flag.Parse()
	if *duty <= 0 || *duty > 1 {
		fmt.Fprintln(os.Stderr, "server: -duty must be in (0, 1]")
		os.Exit(2)
	}
	stop := make(chan struct{})
	const workers = 4
	done := make(chan struct{}, workers)
	for w := 0; w < workers; w++ {
		go func() { serve(*duty/workers, stop); done <- struct{}{} }()
	}
	time.Sleep(time.Duration(*secs * float64(time.Second)))
	close(stop)
	for w := 0; w < workers; w++ {
		<-done
	}
}
