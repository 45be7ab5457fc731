package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/gprofile/gprofile/internal/testutil"
)

// Tests of the outputs people read (per-sample text and JSON, folded
// totals), of pprof files re-symbolized by go tool pprof, of gprofile view
// in a real browser, and of the live status line.

// chainWant is the chain workload's call path, root first.
var chainWant = []string{"main", "chain_a", "chain_b", "chain_c"}

// summaryRx matches the end-of-run line on stderr.
var summaryRx = regexp.MustCompile(`(?m)^gprofile: (\d+) samples \((\d+) lost\)`)

// summaryCount returns the sample count of the end-of-run line in stderr.
func summaryCount(t *testing.T, stderr []byte) int {
	t.Helper()
	m := summaryRx.FindSubmatch(stderr)
	if m == nil {
		t.Fatalf("no end-of-run line in stderr:\n%s", stderr)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// streamedSample is one sample of the text or JSON output, reduced to
// what the checks below need.
type streamedSample struct {
	time          time.Time
	pid, tid, cpu int
	comm          string
	user          []string // user function names, leaf first
}

// profileChainStream profiles the chain workload for 2 s in the given
// per-sample format and returns the output file, the summary count, the
// workload's pid and the wall-clock window of the run.
func profileChainStream(t *testing.T, format string) (out []byte, count, pid int, from, to time.Time) {
	t.Helper()
	cmd, _ := startChain(t, 20)
	pid = cmd.Process.Pid
	path := filepath.Join(t.TempDir(), "out."+format)
	from = time.Now()
	_, stderr, code := runGprofile(t, "-p", strconv.Itoa(pid), "-d", "2", "-f", "499", "--format", format, "-o", path)
	to = time.Now()
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return out, summaryCount(t, stderr), pid, from, to
}

// checkStream applies the checks common to text and JSON: the count
// matches the summary, every sample is the workload's, times lie in the
// run's window and increase on each CPU, and 90% hold the whole chain.
func checkStream(t *testing.T, samples []streamedSample, count, pid int, from, to time.Time) {
	t.Helper()
	if len(samples) != count {
		t.Errorf("%d samples written, the end-of-run line says %d", len(samples), count)
	}
	if count < 200 {
		t.Errorf("only %d samples in 2 s at 499 Hz", count)
	}
	// Sample times come from the kernel's clock moved to wall time at the
	// start; allow 50 ms for that conversion.
	const slack = 50 * time.Millisecond
	last := map[int]time.Time{}
	chained := 0
	for i, s := range samples {
		if s.pid != pid || s.comm != "chain" {
			t.Errorf("sample %d: pid %d comm %q, want %d chain", i, s.pid, s.comm, pid)
		}
		if s.time.Before(from.Add(-slack)) || s.time.After(to.Add(slack)) {
			t.Errorf("sample %d at %v, outside the run [%v, %v]", i, s.time, from, to)
		}
		if prev, ok := last[s.cpu]; ok && !s.time.After(prev) {
			t.Errorf("sample %d at %v on CPU %d, not after the previous one there (%v)", i, s.time, s.cpu, prev)
		}
		last[s.cpu] = s.time
		root := slices.Clone(s.user)
		slices.Reverse(root)
		if hasChain(root, chainWant) {
			chained++
		}
	}
	if chained*10 < len(samples)*9 {
		t.Errorf("%d of %d samples hold main→chain_a→chain_b→chain_c, want 90%%", chained, len(samples))
	}
}

var (
	textHeaderRx = regexp.MustCompile(`^\[(\d+)\.(\d{9})\] COMM: (.+) \(pid=(\d+), tid=(\d+)\) @ CPU (\d+)$`)
	// textFrameRx: address, name, optional "@ start+off", optional
	// file[:line], optional [inlined], optional (reason).
	textFrameRx = regexp.MustCompile(`^0x([0-9a-f]{16}): (\S+)(?: @ 0x([0-9a-f]{16})\+0x([0-9a-f]+))?(?: (\S+?)(?::(\d+))?)?( \[inlined\])?(?: \(([a-z-]+)\))?$`)
)

// parseTextSample parses one block of text output.
func parseTextSample(block string) (streamedSample, error) {
	var s streamedSample
	lines := strings.Split(block, "\n")
	m := textHeaderRx.FindStringSubmatch(lines[0])
	if m == nil {
		return s, fmt.Errorf("bad header %q", lines[0])
	}
	sec, _ := strconv.ParseInt(m[1], 10, 64)
	ns, _ := strconv.ParseInt(m[2], 10, 64)
	s.time = time.Unix(sec, ns)
	s.comm = m[3]
	s.pid, _ = strconv.Atoi(m[4])
	s.tid, _ = strconv.Atoi(m[5])
	s.cpu, _ = strconv.Atoi(m[6])
	part := ""
	for _, ln := range lines[1:] {
		switch ln {
		case "Kernel:", "Userspace:":
			if (ln == "Kernel:") != (part == "") {
				return s, fmt.Errorf("%q out of order", ln)
			}
			part = ln
			continue
		case "No Kernel Stack":
			if part != "" {
				return s, fmt.Errorf("%q out of order", ln)
			}
			part = "Kernel:"
			continue
		case "No Userspace Stack":
			if part != "Kernel:" {
				return s, fmt.Errorf("%q out of order", ln)
			}
			part = "done"
			continue
		}
		f := textFrameRx.FindStringSubmatch(ln)
		if f == nil || part == "" || part == "done" {
			return s, fmt.Errorf("bad frame line %q (in part %q)", ln, part)
		}
		if f[3] != "" {
			addr, _ := strconv.ParseUint(f[1], 16, 64)
			start, _ := strconv.ParseUint(f[3], 16, 64)
			off, _ := strconv.ParseUint(f[4], 16, 64)
			if start+off != addr {
				return s, fmt.Errorf("frame %q: start+offset is not the address", ln)
			}
		}
		if strings.HasPrefix(f[2], "chain_") && (!strings.HasSuffix(f[5], "chain.c") || f[6] == "" || f[3] == "") {
			return s, fmt.Errorf("workload frame %q without symbol start or chain.c:line", ln)
		}
		if part == "Userspace:" {
			s.user = append(s.user, f[2])
		}
	}
	if part != "Userspace:" && part != "done" {
		return s, fmt.Errorf("no user part")
	}
	return s, nil
}

// TestTextOutputChain checks every sample of --format text on the chain
// workload against the format and the run.
func TestTextOutputChain(t *testing.T) {
	testutil.RequirePrivileges(t)
	out, count, pid, from, to := profileChainStream(t, "text")
	var samples []streamedSample
	text := strings.TrimSuffix(string(out), "\n")
	if text != "" {
		for i, block := range strings.Split(text, "\n\n") {
			s, err := parseTextSample(block)
			if err != nil {
				t.Fatalf("sample %d: %v\n%s", i, err, block)
			}
			samples = append(samples, s)
		}
	}
	checkStream(t, samples, count, pid, from, to)
}

// The JSON Lines schema of internal/output/JSON_SCHEMA.md.
type (
	jsonSample struct {
		Time       string      `json:"time"`
		TimeUnixNS int64       `json:"time_unix_ns"`
		PID        *int        `json:"pid"`
		TID        *int        `json:"tid"`
		Comm       string      `json:"comm"`
		CPU        *int        `json:"cpu"`
		Frames     []jsonFrame `json:"frames"`
	}
	jsonFrame struct {
		Address     string       `json:"address"`
		Function    string       `json:"function"`
		SystemName  string       `json:"system_name"`
		SymbolStart string       `json:"symbol_start"`
		File        string       `json:"file"`
		Line        int          `json:"line"`
		Inlined     bool         `json:"inlined"`
		Kernel      bool         `json:"kernel"`
		Reason      string       `json:"reason"`
		Mapping     *jsonMapping `json:"mapping"`
	}
	jsonMapping struct {
		Path    string `json:"path"`
		BuildID string `json:"build_id"`
		Start   string `json:"start"`
		Limit   string `json:"limit"`
		Offset  string `json:"offset"`
	}
)

var hexRx = regexp.MustCompile(`^0x[0-9a-f]+$`)

// parseJSONSample decodes one line strictly and checks it against the
// schema.
func parseJSONSample(line []byte) (streamedSample, error) {
	var s streamedSample
	var js jsonSample
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&js); err != nil {
		return s, err
	}
	if js.PID == nil || js.TID == nil || js.CPU == nil {
		return s, fmt.Errorf("pid, tid or cpu missing")
	}
	tm, err := time.Parse(time.RFC3339Nano, js.Time)
	if err != nil || tm.Location() != time.UTC || tm.UnixNano() != js.TimeUnixNS {
		return s, fmt.Errorf("time %q (%v) does not match time_unix_ns %d", js.Time, err, js.TimeUnixNS)
	}
	s = streamedSample{time: tm, pid: *js.PID, tid: *js.TID, cpu: *js.CPU, comm: js.Comm}
	for i, f := range js.Frames {
		if !hexRx.MatchString(f.Address) || (f.SymbolStart != "" && !hexRx.MatchString(f.SymbolStart)) {
			return s, fmt.Errorf("frame %d: bad address %q or symbol_start %q", i, f.Address, f.SymbolStart)
		}
		if (f.Function == "") == (f.Reason == "") {
			return s, fmt.Errorf("frame %d: function %q with reason %q", i, f.Function, f.Reason)
		}
		if f.SystemName != "" && f.SystemName == f.Function {
			return s, fmt.Errorf("frame %d: system_name equal to function", i)
		}
		if m := f.Mapping; m != nil && !(hexRx.MatchString(m.Start) && hexRx.MatchString(m.Limit) && hexRx.MatchString(m.Offset)) {
			return s, fmt.Errorf("frame %d: bad mapping range %+v", i, *m)
		}
		if i > 0 && f.Kernel && !js.Frames[i-1].Kernel {
			return s, fmt.Errorf("frame %d: kernel frame after a user frame", i)
		}
		if strings.HasPrefix(f.Function, "chain_") && (!strings.HasSuffix(f.File, "chain.c") || f.Line == 0 || f.SymbolStart == "" || f.Mapping == nil || f.Mapping.BuildID == "") {
			return s, fmt.Errorf("workload frame %d without source position, symbol start or build ID: %+v", i, f)
		}
		if !f.Kernel {
			s.user = append(s.user, f.Function)
		}
	}
	return s, nil
}

// TestJSONOutputChain checks every line of --format json on the chain
// workload against JSON_SCHEMA.md and the run.
func TestJSONOutputChain(t *testing.T) {
	testutil.RequirePrivileges(t)
	out, count, pid, from, to := profileChainStream(t, "json")
	var samples []streamedSample
	for i, line := range bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		s, err := parseJSONSample(line)
		if err != nil {
			t.Fatalf("line %d: %v\n%s", i+1, err, line)
		}
		samples = append(samples, s)
	}
	checkStream(t, samples, count, pid, from, to)
}

// TestFoldedTotalMatchesSummary checks that the counts of -E add up to the
// end-of-run line's.
func TestFoldedTotalMatchesSummary(t *testing.T) {
	testutil.RequirePrivileges(t)
	cmd, _ := startChain(t, 20)
	out, stderr, code := runGprofile(t, "-p", strconv.Itoa(cmd.Process.Pid), "-d", "2", "-f", "499", "-E")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	total := 0
	for _, l := range parseFolded(t, out) {
		total += l.count
	}
	if n := summaryCount(t, stderr); total != n || n == 0 {
		t.Errorf("folded counts add up to %d, the end-of-run line says %d", total, n)
	}
}

// TestPprofResymbolize checks the promise that pprof can name frames
// later from the binary: it removes the names of the workload's locations
// from a pprof profile of the chain workload (binary still on disk), has
// go tool pprof -symbolize=local name them again, and wants the function
// names and lines gprofile gave. This fails when a caller's location holds
// its return address, where pprof finds the line after the call, or the
// next function.
func TestPprofResymbolize(t *testing.T) {
	testutil.RequirePrivileges(t)
	cmd, bin := startChain(t, 20)
	dir := t.TempDir()
	path := filepath.Join(dir, "chain.pb.gz")
	if _, _, code := runGprofile(t, "-p", strconv.Itoa(cmd.Process.Pid), "-d", "2", "-f", "499", "-o", path); code != 0 {
		t.Fatalf("exit %d", code)
	}
	orig := parseProfile(t, path)
	lines := func(l *profile.Location) string {
		var s []string
		for _, ln := range l.Line {
			s = append(s, fmt.Sprintf("%s:%d", ln.Function.Name, ln.Line))
		}
		return strings.Join(s, ";")
	}
	want := map[uint64]string{}
	stripped := orig.Copy()
	for _, l := range stripped.Location {
		if m := l.Mapping; m != nil && m.File == bin {
			want[l.Address] = lines(l)
			l.Line = nil
			m.HasFunctions, m.HasFilenames, m.HasLineNumbers, m.HasInlineFrames = false, false, false, false
		}
	}
	if len(want) < 4 {
		t.Fatalf("only %d locations in the workload's mapping %s", len(want), bin)
	}
	strippedPath := filepath.Join(dir, "stripped.pb.gz")
	var buf bytes.Buffer
	if err := stripped.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(strippedPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	re := filepath.Join(dir, "re.pb.gz")
	if b, err := exec.Command("go", "tool", "pprof", "-symbolize=local", "-proto", "-output", re, strippedPath).CombinedOutput(); err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, b)
	}
	got := map[uint64]string{}
	for _, l := range parseProfile(t, re).Location {
		if l.Mapping != nil && l.Mapping.File == bin {
			got[l.Address] = lines(l)
		}
	}
	callers := map[string]bool{}
	for addr, w := range want {
		g, ok := got[addr]
		switch {
		case !ok:
			t.Errorf("location %#x (%s) gone after re-symbolization", addr, w)
		case g == "":
			// go tool pprof's own DWARF reader misses functions in a
			// compile unit's later address ranges (gcc puts main in
			// .text.startup); not gprofile's to fix.
			t.Logf("location %#x (%s): go tool pprof names nothing there", addr, w)
		case g != w:
			t.Errorf("location %#x: gprofile named it %q, go tool pprof -symbolize=local %q", addr, w, g)
		default:
			callers[strings.Split(g, ":")[0]] = true
		}
	}
	if !callers["chain_a"] || !callers["chain_b"] {
		t.Errorf("callers chain_a and chain_b not both re-symbolized (named: %v)", callers)
	}
}

var scriptRx = regexp.MustCompile(`(?is)<script.*?</script>`)

// TestViewInChromium serves the view fixture in-process and renders the
// flame graph page in headless chromium: the fixture's functions must be
// in the rendered DOM outside the page's scripts (drawn, not just
// embedded as data), and a screenshot must be a real picture.
func TestViewInChromium(t *testing.T) {
	testutil.RequireTool(t, "chromium")
	file := writeViewProfile(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	log := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- serveView(ctx, []string{"--http", addr, "--no-browser", file}, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("view did not stop within 10 s of cancel")
		}
	})
	url := "http://" + addr + "/ui/flamegraph"
	client := &http.Client{Timeout: 5 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 200 from %s within 30 s (%v)\n%s", url, err, log.String())
		}
	}

	dom := testutil.RunChromium(t, url, "--dump-dom")
	drawn := scriptRx.ReplaceAll(dom, nil)
	for _, fn := range []string{viewFixtureHotName, viewFixtureMainName} {
		if !bytes.Contains(drawn, []byte(fn)) {
			t.Errorf("rendered flame graph lacks %s outside <script>:\n%.4000s", fn, drawn)
		}
	}

	shot := filepath.Join(t.TempDir(), "view.png")
	testutil.RunChromium(t, url, "--window-size=1200,800", "--screenshot="+shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	colors := map[[4]uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, a := img.At(x, y).RGBA()
			colors[[4]uint32{r, g, bl, a}] = true
		}
	}
	if b.Dx() < 100 || b.Dy() < 100 || len(colors) < 3 {
		t.Errorf("screenshot %v with %d colors: blank page?", b, len(colors))
	}
}

// TestStatusLine runs gprofile on a terminal (script(1) gives it a pty)
// and wants the live status line, redrawn with \r; on a pipe it wants
// none.
func TestStatusLine(t *testing.T) {
	testutil.RequirePrivileges(t)
	script := testutil.RequireTool(t, "script")
	gp := buildGprofile(t)
	dir := t.TempDir()
	status := regexp.MustCompile(`\r\x1b\[Kgprofile: \d+\.\ds / 2s, \d+ samples, \d+ lost, \d+ CPUs`)

	tty := filepath.Join(dir, "tty.pb.gz")
	cmd := exec.Command(script, "-qefc", gp+" -d 2 -f 99 -o "+tty, "/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("script: %v\n%q", err, out)
	}
	if n := len(status.FindAll(out, -1)); n < 3 {
		t.Errorf("%d status lines on a terminal in 2 s, want one every 250 ms:\n%q", n, out)
	}
	if _, err := os.Stat(tty); err != nil {
		t.Errorf("no profile written under script: %v", err)
	}

	_, stderr, code := runGprofile(t, "-d", "1", "-f", "99", "-o", filepath.Join(dir, "pipe.pb.gz"))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if bytes.ContainsAny(stderr, "\r\x1b") || bytes.Contains(stderr, []byte("Ctrl-C to stop")) {
		t.Errorf("status line written to a pipe:\n%q", stderr)
	}
	summaryCount(t, stderr)
}
