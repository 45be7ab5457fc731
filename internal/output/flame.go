package output

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
	"sync"
)

// The flame graph page and the libraries it inlines: d3 and d3-flame-graph
// (flamegraph/README.md says which versions, from where, under which
// licences).
var (
	//go:embed flamegraph/flame.html
	flameHTML string
	//go:embed flamegraph/d3.min.js
	d3JS string
	//go:embed flamegraph/d3-flamegraph.umd.js
	flameGraphJS string
	//go:embed flamegraph/d3-flamegraph.css
	flameGraphCSS string

	// flameTemplate is parsed on first use, not at every start of
	// gprofile (package init runs for every command).
	flameTemplate = sync.OnceValue(func() *template.Template {
		return template.Must(template.New("flame").Parse(flameHTML))
	})
)

// flameRootName is the name of the flame graph's root frame, as in
// flamegraph.pl.
const flameRootName = "all"

// flameNode is one frame of the flame graph tree in d3-flame-graph's input
// format: Value counts the samples of the node and all its children.
type flameNode struct {
	Name     string       `json:"name"`
	Value    int64        `json:"value"`
	Children []*flameNode `json:"children,omitempty"`

	index map[string]*flameNode // children by name, while building
}

// WriteFlameHTML writes the samples of a as one self-contained HTML page with an
// interactive flame graph: the d3 and d3-flame-graph libraries and the
// data are inlined, so the page works offline. Frames can be searched
// (substring, ignoring case; page.html#search=TERM opens with a search),
// clicking one zooms into it, and hovering shows its samples and its
// share of all samples and of its parent. The root is on top (a button
// flips the graph), kernel frames are orange, and frames narrower than a
// pixel are drawn only once zoomed in.
//
// The graph is the one the folded stacks of WriteFolded draw: a root "all",
// the thread names (comm) below it, then user frames root first, then
// kernel frames suffixed "_[k]", with the names FoldedName gives. Values
// are sample counts (Sample.Count). The tree is embedded as JSON
// ({"name", "value", "children"}, children sorted by name) in a
// <script type="application/json" id="profile-data"> element, with '<', '>'
// and '&' escaped so that no "</script>" can end it early. title is the
// page's title, HTML-escaped. Writes to w are buffered; the error is the
// first one w returned.
func WriteFlameHTML(w io.Writer, a *Aggregator, title string) error {
	tree, err := json.Marshal(flameTree(a)) // escapes <, > and & as \u003c...
	if err != nil {
		return fmt.Errorf("write flame graph: %w", err)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	err = flameTemplate().Execute(bw, struct {
		Title          string
		Tree           template.JS
		D3, FlameGraph template.JS
		LibraryCSS     template.CSS
	}{title, template.JS(tree), template.JS(d3JS), template.JS(flameGraphJS), template.CSS(flameGraphCSS)})
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("write flame graph: %w", err)
	}
	return nil
}

// flameTree returns the flame graph tree of the samples of a, made from
// their folded stacks so that it draws exactly what the folded output
// does.
func flameTree(a *Aggregator) *flameNode {
	root := &flameNode{Name: flameRootName}
	names := newFoldedNames(a, false)
	var line []byte
	a.eachRecord(func(s *record, i int) {
		v := a.value(s, i, a.display)
		if v == 0 {
			return
		}
		root.Value += v
		line = names.appendStack(line[:0], s, FoldedOptions{})
		n := root
		// Names hold no ';': appendFoldedName replaces it.
		for rest := line; len(rest) > 0; {
			name := rest
			if j := slices.Index(rest, ';'); j >= 0 {
				name, rest = rest[:j], rest[j+1:]
			} else {
				rest = nil
			}
			n = n.child(name)
			n.Value += v
		}
	})
	root.sort()
	return root
}

// child returns n's child with the given name, adding it if needed.
func (n *flameNode) child(name []byte) *flameNode {
	if c, ok := n.index[string(name)]; ok {
		return c
	}
	if n.index == nil {
		n.index = make(map[string]*flameNode)
	}
	c := &flameNode{Name: string(name)}
	n.index[c.Name] = c
	n.Children = append(n.Children, c)
	return c
}

// sort orders the children of n and its descendants by name, and drops
// the build indexes.
func (n *flameNode) sort() {
	n.index = nil
	slices.SortFunc(n.Children, func(a, b *flameNode) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range n.Children {
		c.sort()
	}
}
