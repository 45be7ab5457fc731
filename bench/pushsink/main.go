// Command pushsink is a local Pyroscope stand-in for bench/pushcost.sh
// and soak runs: it serves internal/push/pushtest's fake Pyroscope
// (both APIs, decoded and checked as Pyroscope defines them) on -addr
// and, at SIGINT or SIGTERM, prints one line: requests, profiles
// decoded, the samples in them (the sum of their samples/count column),
// bytes of request bodies, and decode errors.
//
//	pushsink -addr 127.0.0.1:4040
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/push/pushtest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4040", "address to listen on (host:port)")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pushsink: %v (pick another -addr)\n", err)
		os.Exit(1)
	}
	fake := &pushtest.Pyroscope{}
	var body atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body.Add(int64(len(b)))
		r.Body = io.NopCloser(bytes.NewReader(b))
		fake.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	srv.Shutdown(context.Background())
	got, derr := fake.Received()
	errs := 0
	if derr != nil {
		errs = 1
		fmt.Fprintf(os.Stderr, "pushsink: %v\n", derr)
	}
	var samples int64
	for _, r := range got {
		col := slices.IndexFunc(r.Profile.SampleType, func(t *profile.ValueType) bool { return t.Type == "samples" && t.Unit == "count" })
		if col < 0 {
			continue
		}
		for _, s := range r.Profile.Sample {
			samples += s.Value[col]
		}
	}
	fmt.Printf("requests=%d profiles=%d samples=%d body_bytes=%d decode_errors=%d\n", fake.Requests(), len(got), samples, body.Load(), errs)
	if derr != nil {
		os.Exit(1)
	}
}
