package symbolize

import (
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo/debuginfod"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// waitFor polls cond every 5 ms and fails the test, saying what it waited
// for, when cond is still false after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
	}
}

// waitGeneration waits up to d for s.Generation() to reach want.
func waitGeneration(t *testing.T, s *Symbolizer, want uint64, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for s.Generation() < want {
		if time.Now().After(deadline) {
			t.Fatalf("Generation() = %d after %v, want %d (notes: %q)", s.Generation(), d, want, joinNotes(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// symbolsOnly returns a copy of the binary at orig without DWARF but
// with its .symtab: named by itself, lines only from a debug file.
func symbolsOnly(t *testing.T, orig string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "prog")
	symtest.Run(t, symtest.LookPath(t, "objcopy", "strips the test binary"), "--strip-debug", orig, out)
	return out
}

// TestDebuginfodBackground: with a slow server, Stack does not wait for
// the download: it names the frame from the binary's own .symtab at
// once, and gives its source line once the download is in (Generation),
// dropping the process's cached frames of the binary.
func TestDebuginfodBackground(t *testing.T) {
	orig, _, debug := splitDebug(t)
	bin := symbolsOnly(t, orig)
	id := symtest.GnuBuildID(t, orig)
	answer := make(chan struct{}) // the server answers once the test closes it
	srv := newDebuginfodServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-answer:
		case <-r.Context().Done():
			return
		}
		if strings.Contains(r.URL.Path, id) {
			http.ServeFile(w, r, debug)
			return
		}
		http.NotFound(w, r)
	})
	d := newTestDebuginfod(t, srv.URL, "")

	const base = 0x555555554000
	leaf := base + symtest.ElfSymbol(t, orig, "leaf").Value + 1
	fp := newFakeProc(t)
	fp.setMaps(1, textMapping(t, bin, base))
	s, err := New(Options{ProcRoot: fp.root, KallsymsPath: "testdata/kallsyms.txt", DebugDirs: []string{}, Debuginfod: d.cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Stack returns while the server holds the download back: it does
	// not wait for it (DEBUGINFOD_TIMEOUT is 90 s by default).
	first := make(chan Frame, 1)
	go func() { first <- s.Stack(1, nil, []uint64{leaf}).Frames[0] }()
	var f Frame
	select {
	case f = <-first:
	case <-time.After(30 * time.Second):
		close(answer)
		t.Fatal("Stack waited for the download")
	}
	if f.Function != "leaf" || f.Line != 0 {
		t.Errorf("first frame = %+v; want leaf, from .symtab, without a line", f)
	}
	if f := s.Stack(1, nil, []uint64{leaf}).Frames[0]; f.Function != "leaf" || f.Line != 0 {
		t.Errorf("frame while downloading = %+v", f)
	}
	close(answer)
	waitGeneration(t, s, 1, 10*time.Second)
	f = s.Stack(1, nil, []uint64{leaf}).Frames[0]
	if f.Function != "leaf" || filepath.Base(f.File) != "prog.c" || f.Line == 0 {
		t.Errorf("frame after the download = %+v; want leaf in prog.c with a line", f)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("the server got %d requests, want 1", n)
	}
	if note := joinNotes(s); !strings.Contains(note, "1 debug files downloaded") || !strings.Contains(note, "0 from the cache") {
		t.Errorf("Notes() = %q", note)
	}
}

// TestDebuginfodCloseCancels: Close stops a download that hangs, at
// once rather than after DEBUGINFOD_TIMEOUT, and waits for it.
func TestDebuginfodCloseCancels(t *testing.T) {
	orig, stripped, _ := splitDebug(t)
	release := make(chan struct{})
	defer close(release)
	var ended atomic.Int64
	srv := newDebuginfodServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		defer ended.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	d := newTestDebuginfod(t, srv.URL, "30")

	const base = 0x555555554000
	fp := newFakeProc(t)
	fp.setMaps(1, textMapping(t, stripped, base))
	s, err := New(Options{ProcRoot: fp.root, KallsymsPath: "testdata/kallsyms.txt", DebugDirs: []string{}, Debuginfod: d.cfg})
	if err != nil {
		t.Fatal(err)
	}
	s.Stack(1, nil, []uint64{base + symtest.ElfSymbol(t, orig, "leaf").Value + 1})
	waitFor(t, 10*time.Second, "the download to start", func() bool { return srv.hits.Load() > 0 })
	// The server never answers, the timeout is 30 s: Close returns before
	// then only if it cancels the download.
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waits for a hanging download")
	}
	if s.Generation() != 0 {
		t.Errorf("Generation() = %d after a cancelled download", s.Generation())
	}
	waitFor(t, 10*time.Second, "the server's request to end after Close (cancelled)", func() bool { return ended.Load() > 0 })
	if note := joinNotes(s); !strings.Contains(note, "1 unfinished at exit") || strings.Contains(note, "1 failed") {
		t.Errorf("Notes() = %q; want 1 unfinished, none failed", note)
	}
	s.Close() // idempotent
}

// TestDebuginfodFetcherLimits: one download per build ID at a time, at
// most maxDebuginfodDownloads at once; the rest wait their turn.
func TestDebuginfodFetcherLimits(t *testing.T) {
	release := make(chan struct{}) // one receive lets one request answer
	var running, most atomic.Int64
	srv := newDebuginfodServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-r.Context().Done():
		case release <- struct{}{}:
		}
		http.NotFound(w, r)
	})
	c := newTestDebuginfod(t, srv.URL, "30").client
	d := debuginfod.NewFetcher()
	defer d.Close()
	for _, id := range []string{"aaaa", "bbbb", "aaaa", "cccc", "bbbb"} {
		d.Start(c, debuginfod.Kind{}, id)
	}
	// Three build IDs, two slots: two requests run and hold their slots
	// until released; the third starts only when one ends, so the most
	// ever running at once stays at two.
	waitFor(t, 10*time.Second, "two requests", func() bool { return srv.hits.Load() >= debuginfod.MaxDownloads })
	for range 3 {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d requests, %d running; want 3 in turn", srv.hits.Load(), running.Load())
		}
	}
	waitFor(t, 10*time.Second, "3 not found in the note", func() bool { return strings.Contains(c.Note(), "3 not found") })
	d.Close()
	if n, m := srv.hits.Load(), most.Load(); n != 3 || m != debuginfod.MaxDownloads {
		t.Errorf("%d requests, at most %d at once; want 3, %d", n, m, debuginfod.MaxDownloads)
	}
}
