package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// metric is one line of the Prometheus text format: a name, its type
// (counter or gauge), help, and the value now.
type metric struct {
	name, typ, help string
	value           func() float64
}

// writeMetrics writes ms in the Prometheus text exposition format
// (version 0.0.4).
func writeMetrics(w io.Writer, ms []metric) error {
	bw := bufio.NewWriter(w)
	for _, m := range ms {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", m.name, m.help, m.name, m.typ, m.name,
			strconv.FormatFloat(m.value(), 'g', -1, 64))
	}
	return bw.Flush()
}

// processMetrics are gprofile's own: RSS and open fds (from /proc/self)
// and goroutines, under the names Prometheus's client libraries use.
func processMetrics() []metric {
	return []metric{
		{"process_resident_memory_bytes", "gauge", "Resident memory size in bytes (/proc/self/statm).", func() float64 { return float64(selfRSS()) }},
		{"process_open_fds", "gauge", "Number of open file descriptors (/proc/self/fd).", func() float64 { return float64(selfFDs()) }},
		{"go_goroutines", "gauge", "Number of goroutines that currently exist.", func() float64 { return float64(runtime.NumGoroutine()) }},
		{"go_gc_heap_live_bytes", "gauge", "Heap memory occupied by live objects, as of the last garbage collection (runtime/metrics /gc/heap/live:bytes).", heapLive},
	}
}

// heapLive returns the bytes of live heap as of the last garbage
// collection (runtime/metrics /gc/heap/live:bytes), 0 when the runtime
// does not report it.
func heapLive() float64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return float64(s[0].Value.Uint64())
}

// selfRSS returns gprofile's resident set size in bytes, 0 when
// /proc/self/statm cannot be read.
func selfRSS() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// selfFDs returns how many file descriptors gprofile has open.
func selfFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents) - 1 // the directory's own, open while it is read
}

// serveMetrics listens on addr and serves ms at /metrics until ctx is
// done. It returns once it listens, with the listening address, or the
// listen error (the address is taken, or malformed).
func serveMetrics(ctx context.Context, addr string, ms []metric) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		writeMetrics(w, ms)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "gprofile: --metrics: %v\n", err)
		}
	}()
	return ln.Addr(), nil
}
