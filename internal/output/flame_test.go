package output

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize"
)

const flameDataOpen = `<script type="application/json" id="profile-data">`

// flameData returns the tree embedded in a flame graph page.
func flameData(t *testing.T, page string) *flameNode {
	t.Helper()
	_, rest, ok := strings.Cut(page, flameDataOpen)
	if !ok {
		t.Fatalf("no %s in the page", flameDataOpen)
	}
	data, _, ok := strings.Cut(rest, "</script>")
	if !ok {
		t.Fatal("data script not closed")
	}
	var root flameNode
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("embedded data: %v\n%s", err, data)
	}
	return &root
}

// flameLines returns the folded lines a flame graph tree draws: every
// path from below the root with samples of its own (value minus the
// children's), checking on the way that values add up and children are
// sorted.
func flameLines(t *testing.T, n *flameNode, prefix string, lines map[string]int64) {
	self := n.Value
	for i, c := range n.Children {
		if i > 0 && n.Children[i-1].Name >= c.Name {
			t.Errorf("children of %q not sorted: %q, %q", prefix, n.Children[i-1].Name, c.Name)
		}
		if c.Value <= 0 {
			t.Errorf("%s;%s has value %d", prefix, c.Name, c.Value)
		}
		self -= c.Value
		path := c.Name
		if prefix != "" {
			path = prefix + ";" + c.Name
		}
		flameLines(t, c, path, lines)
	}
	if self < 0 {
		t.Errorf("%q: children sum to more than its value %d", prefix, n.Value)
	}
	if self > 0 && prefix != "" {
		lines[prefix] += self
	}
}

// foldedLines parses WriteFolded's output.
func foldedLines(t *testing.T, a *Aggregator) map[string]int64 {
	var buf bytes.Buffer
	if err := WriteFolded(&buf, a); err != nil {
		t.Fatal(err)
	}
	lines := map[string]int64{}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.ParseInt(line[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("folded line %q: %v", sc.Text(), err)
		}
		lines[line[:max(i, 0)]] = n
	}
	return lines
}

func TestFlameHTMLMatchesFolded(t *testing.T) {
	samples := newFixture().aggregateByThread() // same lines as by process
	var buf bytes.Buffer
	if err := WriteFlameHTML(&buf, samples, "fixture"); err != nil {
		t.Fatal(err)
	}
	root := flameData(t, buf.String())
	if root.Name != "all" || root.Value != 20 {
		t.Errorf("root %q with value %d, want all with 20", root.Name, root.Value)
	}
	got := map[string]int64{}
	flameLines(t, root, "", got)
	want := foldedLines(t, samples)
	if !maps.Equal(got, want) {
		t.Errorf("flame graph draws\n%v\nfolded stacks are\n%v", got, want)
	}
	var comms []string
	for _, c := range root.Children {
		comms = append(comms, c.Name)
	}
	if strings.Join(comms, ",") != "[unknown],app,kworker/0:1,server,worker:1" {
		t.Errorf("comm level %q", comms)
	}
}

// TestFlameHTMLEscaping checks that names and the title cannot end the
// data or script elements or inject markup.
func TestFlameHTMLEscaping(t *testing.T) {
	evil := "</script><script>alert(1)</script><!--"
	st := &symbolize.Stack{Frames: []symbolize.Frame{{Address: 1, Function: evil + "&amp;\u2028"}}}
	samples := aggregateOf(Sample{PID: 1, Comm: evil, Stack: st, Count: 3})
	var buf bytes.Buffer
	if err := WriteFlameHTML(&buf, samples, evil+`"'&`); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<!--") {
		t.Errorf("a name or the title reaches the page unescaped")
	}
	if n := strings.Count(page, "</script>"); n != 4 {
		t.Errorf("%d </script> in the page, want 4 (data, d3, d3-flame-graph, ours)", n)
	}
	if !strings.Contains(page, "<title>&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;!--&#34;&#39;&amp;</title>") {
		t.Errorf("title not escaped:\n%s", page[:min(len(page), 600)])
	}
	// Names come back as folded stacks write them (';' to ':', U+2028 to '?').
	root := flameData(t, page)
	if len(root.Children) != 1 || root.Children[0].Name != evil || len(root.Children[0].Children) != 1 ||
		root.Children[0].Children[0].Name != evil+"&amp:?" {
		t.Errorf("names changed on the way: %q", flameNames(root))
	}
}

// TestFlameHTMLSelfContained checks that the page loads nothing.
func TestFlameHTMLSelfContained(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFlameHTML(&buf, NewAggregator(), "empty"); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, s := range []string{"<script src", "<link", "@import", "<iframe", "<img"} {
		if strings.Contains(page, s) {
			t.Errorf("page holds %q", s)
		}
	}
	if root := flameData(t, page); root.Name != "all" || root.Value != 0 || root.Children != nil {
		t.Errorf("empty tree %+v", root)
	}
	for _, s := range []string{"d3js.org v7", "flamegraph", ".d3-flame-graph rect"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q: libraries not inlined?", s)
		}
	}
}

func TestFlameHTMLError(t *testing.T) {
	errDisk := errors.New("disk full")
	if err := WriteFlameHTML(failWriter{errDisk}, NewAggregator(), "x"); !errors.Is(err, errDisk) {
		t.Errorf("got error %v, want one wrapping %v", err, errDisk)
	}
}

// flameNames returns the names of n and its descendants, depth first.
func flameNames(n *flameNode) []string {
	names := []string{n.Name}
	for _, c := range n.Children {
		names = append(names, flameNames(c)...)
	}
	return names
}
