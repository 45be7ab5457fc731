package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/symbolize"
)

// Function names of the view fixture, unusual enough not to appear in
// pprof's pages by chance.
const (
	viewFixtureHotName  = "viewFixtureHotLoop"
	viewFixtureMainName = "viewFixtureMain"
)

// writeViewProfile writes a small pprof profile: 3 samples in viewFixtureHotName
// called from viewFixtureMainName, 1 in viewFixtureMainName.
func writeViewProfile(t *testing.T) string {
	t.Helper()
	m := &symbolize.Mapping{Start: 0x401000, Limit: 0x402000, Offset: 0x1000, Path: "/usr/bin/viewfixture",
		BuildID: "feedface", Device: 1, Inode: 2}
	caller := symbolize.Frame{Address: 0x401100, Function: viewFixtureMainName, SystemName: viewFixtureMainName, File: "v.c", Line: 9, Mapping: m}
	hot := &symbolize.Stack{Frames: []symbolize.Frame{
		{Address: 0x401200, Function: viewFixtureHotName, SystemName: viewFixtureHotName, File: "v.c", Line: 3, Mapping: m}, caller}}
	top := &symbolize.Stack{Frames: []symbolize.Frame{caller}}
	a := output.NewAggregator()
	key := output.SampleKey{PID: 7, Comm: "viewfixture"}
	for range 3 {
		a.AddStack(key, a.InternStack(7, hot), 1e7)
	}
	a.AddStack(key, a.InternStack(7, top), 1e7)
	var buf bytes.Buffer
	if err := output.WritePprof(&buf, a, output.Meta{Period: 1e7, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "view.pb.gz")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a bytes.Buffer safe for the server goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestViewServesPprofUI(t *testing.T) {
	file := writeViewProfile(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- serveView(ctx, []string{"--http", strings.TrimPrefix(base, "http://"), "--no-browser", file}, log)
	}()

	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (*http.Response, string, error) {
		resp, err := client.Get(base + path)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, string(body), err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, _, err := get("/")
		if err == nil && resp.StatusCode == http.StatusOK {
			if p := resp.Request.URL.Path; p != "/ui/flamegraph" {
				t.Errorf("/ redirects to %s, want /ui/flamegraph", p)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("view returned before serving: %v\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 200 from %s/ within 30 s (last error %v, response %v)\n%s", base, err, resp, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, path := range []string{"/ui/flamegraph", "/ui/top", "/ui/peek?f=" + viewFixtureMainName} {
		resp, body, err := get(path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %v %v", path, resp, err)
			continue
		}
		for _, fn := range []string{viewFixtureHotName, viewFixtureMainName} {
			if !strings.Contains(body, fn) {
				t.Errorf("GET %s: page lacks %s", path, fn)
			}
		}
	}
	if !strings.Contains(log.String(), "Serving web UI on "+base) {
		t.Errorf("no URL printed:\n%s", log.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("view after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("view did not stop within 10 s of cancel")
	}
}

func TestViewErrors(t *testing.T) {
	dir := t.TempDir()
	notProfile := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notProfile, []byte("just some text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := writeViewProfile(t)
	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{nil, true, "missing FILE"},
		{[]string{"--no-browser"}, true, "missing FILE"},
		{[]string{good, good}, true, "one FILE at a time"},
		{[]string{"--http", "8080", good}, true, `bad --http address "8080"`},
		{[]string{"--bogus", good}, true, "flag provided but not defined: -bogus"},
		{[]string{filepath.Join(dir, "missing.pb.gz")}, false, "no such file or directory"},
		{[]string{notProfile}, false, "notes.txt is not a pprof profile"},
	} {
		var stderr bytes.Buffer
		err := serveView(context.Background(), c.args, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, errViewUsage) != c.usage {
			t.Errorf("view %q: error %v, want one with %q (usage error: %v)", c.args, err, c.want, c.usage)
		}
	}
	// runView is serveView with a signal context: same errors.
	if err := runView(nil); !errors.Is(err, errViewUsage) {
		t.Errorf("runView(nil) = %v", err)
	}
}

func TestViewHelp(t *testing.T) {
	var stderr bytes.Buffer
	if err := serveView(context.Background(), []string{"-h"}, &stderr); !errors.Is(err, errHelp) {
		t.Errorf("-h: error %v, want errHelp", err)
	}
	for _, s := range []string{"gprofile view [--http ADDR] [--no-browser] FILE", "--http host:port", "--no-browser"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("help lacks %q:\n%s", s, stderr.String())
		}
	}
}

// TestViewArgsAfterFile checks that flags may follow FILE.
func TestViewArgsAfterFile(t *testing.T) {
	o, err := parseViewArgs([]string{"p.pb.gz", "--http", ":9090", "--no-browser"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.file != "p.pb.gz" || o.http != ":9090" || !o.noBrowser {
		t.Errorf("got %+v", o)
	}
}

// TestViewNoDisplay: without DISPLAY and WAYLAND_DISPLAY no browser is
// started (as root Chromium would print a sandbox error); the URL is
// printed instead. With a display, the browser is left on.
func TestViewNoDisplay(t *testing.T) {
	saved := viewGetenv
	defer func() { viewGetenv = saved }()
	env := map[string]string{}
	viewGetenv = func(k string) string { return env[k] }
	var stderr bytes.Buffer
	o, err := parseViewArgs([]string{"p.pb.gz"}, &stderr)
	if err != nil || !o.noBrowser || !strings.Contains(stderr.String(), "no DISPLAY or WAYLAND_DISPLAY, so no browser") {
		t.Errorf("no display: %+v, %v, said %q; want no browser and a note", o, err, stderr.String())
	}
	for _, k := range []string{"DISPLAY", "WAYLAND_DISPLAY"} {
		env = map[string]string{k: ":0"}
		stderr.Reset()
		if o, err := parseViewArgs([]string{"p.pb.gz"}, &stderr); err != nil || o.noBrowser || stderr.Len() != 0 {
			t.Errorf("%s set: %+v, %v, said %q; want the browser", k, o, err, stderr.String())
		}
	}
}
