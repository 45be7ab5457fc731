package symbolize

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/debuginfo"
	"github.com/gprofile/gprofile/internal/symbolize/debuginfo/debuginfod"
	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
)

// The package's tests never reach a real debuginfod server, whatever the
// environment that runs them (Fedora sets DEBUGINFOD_URLS for every
// login shell): the debuginfod tests set it themselves.

// debuginfodServer is a test debuginfod server that serves files by
// build ID and counts the requests it got.
type debuginfodServer struct {
	*httptest.Server
	hits  atomic.Int64
	files map[string]string // build ID: path of the file to serve
}

// newDebuginfodServer starts a server that sends files[id] for
// /buildid/{id}/debuginfo, and 404 for anything else, after handle (if
// not nil) had its say.
func newDebuginfodServer(t *testing.T, files map[string]string, handle http.HandlerFunc) *debuginfodServer {
	s := &debuginfodServer{files: files}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if handle != nil {
			handle(w, r)
			return
		}
		id, ok := strings.CutPrefix(r.URL.Path, "/buildid/")
		id, ok2 := strings.CutSuffix(id, "/debuginfo")
		if path := s.files[id]; ok && ok2 && path != "" {
			http.ServeFile(w, r, path)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// testDebuginfod is a debuginfod configuration for a test: its servers,
// a new cache, and the client a run of objfile.Load would use.
type testDebuginfod struct {
	cfg    debuginfod.Config
	client *debuginfod.Client
	cache  string
}

// newTestDebuginfod points a debuginfod client at urls with a new cache;
// timeout sets DEBUGINFOD_TIMEOUT when not "". The configuration is read
// as cmd/gprofile reads it from the environment.
func newTestDebuginfod(t *testing.T, urls, timeout string) *testDebuginfod {
	env := map[string]string{"DEBUGINFOD_URLS": urls, "DEBUGINFOD_CACHE_PATH": t.TempDir(), "DEBUGINFOD_TIMEOUT": timeout}
	cfg, ok := debuginfod.ReadConfig(func(k string) string { return env[k] })
	if !ok {
		t.Fatalf("debuginfod configuration %v is off", env)
	}
	return &testDebuginfod{cfg: cfg, client: debuginfod.NewClient(cfg), cache: cfg.Cache}
}

// opts returns the options of a load through d's client, with no debug
// directories.
func (d *testDebuginfod) opts() debuginfo.Options {
	return debuginfo.Options{DebugDirs: []string{}, Debuginfod: d.client}
}

// forget starts a new client, as a new run of the program starts
// without what the last one remembered (only the disk cache is left).
func (d *testDebuginfod) forget() { d.client = debuginfod.NewClient(d.cfg) }

// joinNotes returns a Symbolizer's notes as one string.
func joinNotes(s *Symbolizer) string { return strings.Join(s.Notes(), "; ") }

// TestDebuginfodStack: a stripped binary (no .symtab, no DWARF, no debug
// file on disk) gets its function names and lines from the debug file a
// debuginfod server sends, once: in the background, so the first Stack
// has no name and a Stack after Generation changed has them; later
// lookups, in this run or the next, use the cache at once.
func TestDebuginfodStack(t *testing.T) {
	orig, stripped, debug := splitDebug(t)
	id := symtest.GnuBuildID(t, orig)
	srv := newDebuginfodServer(t, map[string]string{id: debug}, nil)
	d := newTestDebuginfod(t, "ftp://ignored.example "+srv.URL+"/", "")
	cache := d.cache

	const base = 0x555555554000
	leaf := base + symtest.ElfSymbol(t, orig, "leaf").Value + 1
	var notes string
	for run := 0; run < 3; run++ { // each Symbolizer a new run: only the disk cache is left
		fp := newFakeProc(t)
		fp.setMaps(1, textMapping(t, stripped, base))
		s, err := New(Options{ProcRoot: fp.root, KallsymsPath: "testdata/kallsyms.txt", DebugDirs: []string{}, Debuginfod: d.cfg})
		if err != nil {
			t.Fatal(err)
		}
		f := s.Stack(1, nil, []uint64{leaf}).Frames[0]
		if run == 0 {
			if f.Function != "" { // the download may be done by now, but not used yet
				t.Errorf("first Stack waited for the download: %+v", f)
			}
			waitGeneration(t, s, 1, 10*time.Second)
			f = s.Stack(1, nil, []uint64{leaf}).Frames[0]
		}
		s.Close()
		notes = joinNotes(s)
		if f.Function != "leaf" || filepath.Base(f.File) != "prog.c" || f.Line == 0 {
			t.Errorf("run %d: frame = %+v; want leaf in prog.c with a line", run, f)
		}
		if n := srv.hits.Load(); n != 1 {
			t.Errorf("run %d: the server got %d requests, want 1", run, n)
		}
	}
	st, err := os.Stat(filepath.Join(cache, id, "debuginfo"))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("cached file: %v, %v; want mode 0644", st, err)
	}
	if st, err := os.Stat(filepath.Join(cache, id)); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("cache directory: %v, %v; want mode 0755", st, err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(cache, id, "*.tmp")); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
	if !strings.Contains(notes, "0 debug files downloaded") || !strings.Contains(notes, "1 from the cache") {
		t.Errorf("Notes() = %q after a new run", notes)
	}
}

// TestDebuginfodMiss: a server's 404 leaves the binary as it is, is
// remembered for the run and, as an empty cache file, for cache_miss_s.
func TestDebuginfodMiss(t *testing.T) {
	orig, stripped, _ := splitDebug(t)
	id := symtest.GnuBuildID(t, orig)
	srv := newDebuginfodServer(t, nil, nil)
	d := newTestDebuginfod(t, srv.URL, "")
	cache := d.cache
	for i := 0; i < 2; i++ {
		b := loadFile(t, stripped, d.opts())
		checkNamed(t, b, orig, "leaf", false)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("the server got %d requests, want 1", n)
	}
	marker := filepath.Join(cache, id, "debuginfo")
	if st, err := os.Stat(marker); err != nil || st.Size() != 0 {
		t.Fatalf("miss marker: %v, %v; want an empty file", st, err)
	}
	if note := d.client.Note(); !strings.Contains(note, "1 not found") {
		t.Errorf("Note() = %q", note)
	}
	d.forget()
	loadFile(t, stripped, d.opts())
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("a new run asked again (%d requests) within cache_miss_s", n)
	}
	// An expired miss is asked again.
	old := time.Now().Add(-debuginfod.CacheMiss - time.Minute)
	if err := os.Chtimes(marker, old, old); err != nil {
		t.Fatal(err)
	}
	d.forget()
	loadFile(t, stripped, d.opts())
	if n := srv.hits.Load(); n != 2 {
		t.Errorf("after the miss expired the server got %d requests, want 2", n)
	}
}

// TestDebuginfodWrongFile: a file that is not ELF, or is the debug file
// of another build, is refused and never cached; the next server is
// asked.
func TestDebuginfodWrongFile(t *testing.T) {
	orig, stripped, debug := splitDebug(t)
	id := symtest.GnuBuildID(t, orig)
	other := symtest.BuildProg(t, false) // another build ID
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, []byte("not ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad1 := newDebuginfodServer(t, map[string]string{id: other}, nil)
	bad2 := newDebuginfodServer(t, map[string]string{id: junk}, nil)
	redirect := newDebuginfodServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file://"+debug, http.StatusFound)
	})
	d := newTestDebuginfod(t, redirect.URL+" "+bad1.URL+" "+bad2.URL, "")
	cache := d.cache
	b := loadFile(t, stripped, d.opts())
	checkNamed(t, b, orig, "leaf", false)
	if entries, _ := os.ReadDir(filepath.Join(cache, id)); len(entries) != 0 {
		t.Errorf("cache holds %v after wrong files", entries)
	}
	if note := d.client.Note(); !strings.Contains(note, "1 failed") || !strings.Contains(note, "not an ELF file") {
		t.Errorf("Note() = %q", note)
	}

	good := newDebuginfodServer(t, map[string]string{id: debug}, nil)
	d = newTestDebuginfod(t, bad1.URL+" "+good.URL, "")
	b = loadFile(t, stripped, d.opts())
	checkNamed(t, b, orig, "leaf", true)
	if bad1.hits.Load() != 2 || good.hits.Load() != 1 {
		t.Errorf("requests: %d to the wrong server, %d to the good one; want 2, 1", bad1.hits.Load(), good.hits.Load())
	}
}

// TestDebuginfodTimeout: a server that never answers, or stops sending,
// costs DEBUGINFOD_TIMEOUT, once: it is then skipped for a while.
func TestDebuginfodTimeout(t *testing.T) {
	orig, stripped, debug := splitDebug(t)
	id := symtest.GnuBuildID(t, orig)
	release := make(chan struct{})
	defer close(release)
	// Each slow server holds its request until the client gives up
	// (DEBUGINFOD_TIMEOUT 0.3 s) and counts that, or until the test ends.
	var gaveUp atomic.Int64
	hold := func(r *http.Request) {
		select {
		case <-r.Context().Done():
			gaveUp.Add(1)
		case <-release:
		}
	}
	hang := newDebuginfodServer(t, nil, func(w http.ResponseWriter, r *http.Request) { hold(r) })
	stall := newDebuginfodServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.Write([]byte("\x7fELF"))
		w.(http.Flusher).Flush()
		hold(r)
	})
	good := newDebuginfodServer(t, map[string]string{id: debug}, nil)
	d := newTestDebuginfod(t, hang.URL+" "+stall.URL+" "+good.URL, "0.3")
	b := loadFile(t, stripped, d.opts())
	checkNamed(t, b, orig, "leaf", true)
	// A server sees the client give up (its request's context done) only
	// once the closed connection reaches it, which may be after loadFile
	// has returned: wait for it, a bounded time.
	for deadline := time.Now().Add(5 * time.Second); gaveUp.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := gaveUp.Load(); n != 2 {
		t.Errorf("the client gave up on %d slow requests, want both (its timeout)", n)
	}
	if note := d.client.Note(); !strings.Contains(note, "1 debug files downloaded") {
		t.Errorf("Note() = %q", note)
	}

	// Both slow servers are skipped now: another binary costs no timeout.
	stripped2 := filepath.Join(t.TempDir(), "prog2")
	symtest.Run(t, symtest.LookPath(t, "objcopy", "strips the test binary"), "--strip-debug", "--strip-unneeded", symtest.BuildProg(t, false), stripped2)
	loadFile(t, stripped2, d.opts())
	if hang.hits.Load() != 1 || stall.hits.Load() != 1 {
		t.Errorf("second binary: %d and %d requests to the slow servers; want 1 and 1 (skipped now)",
			hang.hits.Load(), stall.hits.Load())
	}
}

// TestDebuginfodOff: without DEBUGINFOD_URLS nothing is asked or cached.
func TestDebuginfodOff(t *testing.T) {
	_, stripped, _ := splitDebug(t)
	srv := newDebuginfodServer(t, nil, nil)
	cache := t.TempDir()
	env := map[string]string{"DEBUGINFOD_CACHE_PATH": cache}
	if cfg, ok := debuginfod.ReadConfig(func(k string) string { return env[k] }); ok || len(cfg.URLs) != 0 {
		t.Fatalf("ReadConfig without DEBUGINFOD_URLS = %+v, %v; want off", cfg, ok)
	}
	b := loadFile(t, stripped, debuginfo.Options{DebugDirs: []string{}})
	fp := newFakeProc(t)
	fp.setMaps(1, textMapping(t, stripped, 0x555555554000))
	s, err := New(Options{ProcRoot: fp.root, KallsymsPath: "testdata/kallsyms.txt", DebugDirs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	s.Stack(1, nil, []uint64{0x555555555000})
	s.Close()
	if b.DebugFile() != "" || srv.hits.Load() != 0 || len(s.Notes()) != 0 {
		t.Errorf("DebugFile() = %q, %d requests, notes %q; want none", b.DebugFile(), srv.hits.Load(), s.Notes())
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("cache holds %v", entries)
	}
	// A binary with DWARF of its own never asks either.
	d := newTestDebuginfod(t, srv.URL, "")
	loadFile(t, symtest.BuildProg(t, true), d.opts())
	if srv.hits.Load() != 0 {
		t.Errorf("a binary with DWARF made %d requests", srv.hits.Load())
	}
}

func TestDebuginfodConfig(t *testing.T) {
	env := map[string]string{
		"DEBUGINFOD_URLS":    " https://a.example/  file:///srv http://b.example:8002 ",
		"XDG_CACHE_HOME":     "/xdg",
		"HOME":               "/home/u",
		"DEBUGINFOD_TIMEOUT": "2.5",
		"DEBUGINFOD_MAXSIZE": "1000",
		"DEBUGINFOD_MAXTIME": "-1",
	}
	c, ok := debuginfod.ReadConfig(func(k string) string { return env[k] })
	if !ok || strings.Join(c.URLs, " ") != "https://a.example http://b.example:8002" || len(c.Skipped) != 1 ||
		c.Cache != "/xdg/debuginfod_client" || c.Timeout != 2500*time.Millisecond ||
		c.MaxTime != debuginfod.MaxTime || c.MaxSize != 1000 {
		t.Errorf("config = %+v, %v", c, ok)
	}
	delete(env, "XDG_CACHE_HOME")
	if c, _ := debuginfod.ReadConfig(func(k string) string { return env[k] }); c.Cache != "/home/u/.cache/debuginfod_client" {
		t.Errorf("cache without XDG_CACHE_HOME = %q", c.Cache)
	}
	env["DEBUGINFOD_URLS"] = "file:///srv"
	if _, ok := debuginfod.ReadConfig(func(k string) string { return env[k] }); ok {
		t.Error("client on with no http(s) server")
	}
	for id, want := range map[string]bool{"0123abcd": true, "0123ABCD": false, "../../etc": false, "abc": false, "": false} {
		if debuginfod.ValidBuildID(id) != want {
			t.Errorf("validBuildID(%q) = %v", id, !want)
		}
	}
}
