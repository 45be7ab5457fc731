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
	const delay = time.Second
	srv := newDebuginfodServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
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
	start := time.Now()
	f := s.Stack(1, nil, []uint64{leaf}).Frames[0]
	if d := time.Since(start); d > delay/2 {
		t.Errorf("first Stack took %v; the server answers after %v", d, delay)
	}
	if f.Function != "leaf" || f.Line != 0 {
		t.Errorf("first frame = %+v; want leaf, from .symtab, without a line", f)
	}
	if f := s.Stack(1, nil, []uint64{leaf}).Frames[0]; f.Function != "leaf" || f.Line != 0 {
		t.Errorf("frame while downloading = %+v", f)
	}
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
	for srv.hits.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v with a download hanging", d)
	}
	if s.Generation() != 0 {
		t.Errorf("Generation() = %d after a cancelled download", s.Generation())
	}
	deadline := time.Now().Add(2 * time.Second)
	for ended.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ended.Load() == 0 {
		t.Error("the server's request still runs after Close: not cancelled")
	}
	if note := joinNotes(s); !strings.Contains(note, "1 unfinished at exit") || strings.Contains(note, "1 failed") {
		t.Errorf("Notes() = %q; want 1 unfinished, none failed", note)
	}
	s.Close() // idempotent
}

// TestDebuginfodFetcherLimits: one download per build ID at a time, at
// most maxDebuginfodDownloads at once; the rest wait their turn.
func TestDebuginfodFetcherLimits(t *testing.T) {
	release := make(chan struct{})
	var running, most atomic.Int64
	srv := newDebuginfodServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
		http.NotFound(w, r)
	})
	c := newTestDebuginfod(t, srv.URL, "30").client
	d := debuginfod.NewFetcher()
	defer d.Close()
	for _, id := range []string{"aaaa", "bbbb", "aaaa", "cccc", "bbbb"} {
		d.Start(c, debuginfod.Kind{}, id)
	}
	for srv.hits.Load() < debuginfod.MaxDownloads {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := srv.hits.Load(); n != debuginfod.MaxDownloads {
		t.Errorf("%d requests under way, want %d", n, debuginfod.MaxDownloads)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(c.Note(), "3 not found") {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests, note %q; want 3, 3 not found", srv.hits.Load(), c.Note())
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.Close()
	if n, m := srv.hits.Load(), most.Load(); n != 3 || m != debuginfod.MaxDownloads {
		t.Errorf("%d requests, at most %d at once; want 3, %d", n, m, debuginfod.MaxDownloads)
	}
}
