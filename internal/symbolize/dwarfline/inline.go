package dwarfline

import (
	"cmp"
	"slices"

	"github.com/gprofile/gprofile/internal/symbolize/demangle"
	"github.com/gprofile/gprofile/internal/symbolize/srcline"
)

// maxOriginHops bounds how many DW_AT_abstract_origin and
// DW_AT_specification references a name lookup follows.
const maxOriginHops = 4

// inlineTree is the code-bearing part of a CU's DIE tree: every
// DW_TAG_subprogram with code and every DW_TAG_inlined_subroutine, in
// pre-order. The children of a subprogram outside any other (a unit's
// functions) are read when a lookup first lands in it (Table.expandNode):
// a unit read for one address (a line memo's miss) reads the inlined
// calls of one function, not of all (BenchmarkUnitFirstLookup).
type inlineTree struct {
	nodes  []inlNode
	ranges [][2]uint64 // [lo, hi) address ranges of the nodes
	funcs  []pcRange   // subprogram ranges, sorted by lo; idx is into nodes
	// kids holds the subtrees read late: nodes[kids[i][0]:kids[i][1]]
	// for node i, appended after the rest.
	kids map[int32][2]int32
	// unread is how many nodes still have lazy set.
	unread int
}

// inlNode is a subprogram (physical) or an inlined call. Its subtree is
// nodes[i+1:end], or the span kids holds for it when it was read late;
// its ranges are tree.ranges[rlo:rhi]. Its name is resolved from die on
// first use and kept in Table.nodeNames: most nodes are never named, and
// a node is 32 bytes without one.
type inlNode struct {
	die      uint64 // .debug_info offset of the DIE
	end      int32
	rlo, rhi int32
	callFile uint32 // DW_AT_call_file, a file index of the CU
	callLine uint32 // DW_AT_call_line
	physical bool
	lazy     bool // a subprogram whose children are not read yet
}

// funcName is a function's display and system (linkage) names.
type funcName struct{ display, system string }

// contains reports whether one of n's ranges in t holds pc.
func (t *inlineTree) contains(n *inlNode, pc uint64) bool {
	for _, r := range t.ranges[n.rlo:n.rhi] {
		if r[0] <= pc && pc < r[1] {
			return true
		}
	}
	return false
}

// readInlineTree walks cu's DIEs into cu.tree, leaving the children of
// its functions (subprograms in no other) for expandNode. On corrupt
// DWARF the tree is dropped, and cu's addresses get no inlined frames.
func (u *unitLoader) readInlineTree(cu *cuLines) {
	t := &cu.tree
	defer func() {
		if recover() != nil {
			*t = inlineTree{}
		}
	}()
	root := u.d.rootOf(cu.u)
	if !root.ok || !root.children {
		return
	}
	r, ok := u.d.newDIEReader(cu.u, root.firstChild)
	if !ok {
		return
	}
	w := treeWalk{tree: t, depth: 1}
	if !u.walkTree(&r, &w, true) {
		*t = inlineTree{} // half a tree would mislead
		return
	}
	sortFuncs(t)
}

// walkTree reads DIEs from r into w's tree until w.depth falls to 0 (the
// end of the child list it started in); with lazy, a subprogram with
// code outside any other gets its children skipped and is marked lazy.
// False on corrupt DWARF.
func (u *unitLoader) walkTree(r *dieReader, w *treeWalk, lazy bool) bool {
	t := w.tree
	for w.depth > 0 {
		off := uint64(r.b.off)
		ab := r.next()
		if ab == nil {
			if r.b.bad {
				return false
			}
			w.close(0) // the CU's terminator is missing
			break
		}
		if ab == &nullDIE { // end of a child list
			w.close(w.depth - 1)
			continue
		}
		n, sib := u.treeNode(t, r, ab, off, w.inFunc > 0)
		switch {
		case r.b.bad:
			return false
		case n < 0 && !holdsCode(ab.tag):
			if ab.children {
				r.skipChildren(off, sib)
			}
		case lazy && n >= 0 && w.inFunc == 0 && t.nodes[n].physical && ab.children:
			t.nodes[n].lazy = true
			t.unread++
			r.skipChildren(off, sib)
		case ab.children:
			w.open(n)
		}
	}
	return true
}

// sortFuncs sorts t.funcs by address.
func sortFuncs(t *inlineTree) {
	slices.SortFunc(t.funcs, func(a, b pcRange) int { return cmp.Compare(a.lo, b.lo) })
}

// expandNode reads the children of node i of cu's tree when they are not
// read yet (lazy), appending them to the tree (kids) and their
// subprograms to funcs, and reports whether funcs grew. On corrupt DWARF
// the node keeps no children: its addresses get no inlined frames. The
// caller holds x.mu.
func (x *Table) expandNode(cu *cuLines, i int) (grew bool) {
	t := &cu.tree
	n := &t.nodes[i]
	if !n.lazy {
		return false
	}
	n.lazy = false
	t.unread--
	nodes, ranges, funcs := len(t.nodes), len(t.ranges), len(t.funcs)
	u := x.own
	die := n.die
	end := 0 // .debug_info offset where the children end
	ok := func() (ok bool) {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		r, ok := u.d.newDIEReader(cu.u, die)
		if !ok {
			return false
		}
		ab := r.next()
		if ab == nil || ab == &nullDIE || !ab.children {
			return false
		}
		r.skipAttrs(ab)
		if r.b.bad {
			return false
		}
		w := treeWalk{tree: t, depth: 1, inFunc: 1}
		ok = u.walkTree(&r, &w, false)
		end = r.b.off
		return ok
	}()
	if u.release {
		u.d.InfoZ.release(int(die), end) // as loadUnit does
	}
	if !ok {
		t.nodes, t.ranges, t.funcs = t.nodes[:nodes], t.ranges[:ranges], t.funcs[:funcs]
		return false
	}
	if t.kids == nil {
		t.kids = make(map[int32][2]int32)
	}
	t.kids[int32(i)] = [2]int32{int32(nodes), int32(len(t.nodes))}
	if len(t.funcs) > funcs {
		sortFuncs(t)
		return true
	}
	return false
}

// expandAll reads the children of every lazy node of cu's tree: a pc in
// none of the functions found so far may be in one nested in another
// (a GCC nested function, an OpenMP region). It reports whether funcs
// grew.
func (x *Table) expandAll(cu *cuLines) (grew bool) {
	t := &cu.tree
	for i := 0; t.unread > 0 && i < len(t.nodes); i++ {
		if x.expandNode(cu, i) {
			grew = true
		}
	}
	return grew
}

// skipChildren moves r past the children of the DIE at off just read:
// to its DW_AT_sibling sib when that lies ahead in the unit, else by
// walking them.
func (r *dieReader) skipChildren(off, sib uint64) {
	limit := uint64(len(r.b.data))
	if r.b.src != nil {
		limit = uint64(r.b.src.limit)
	}
	if sib > off && sib <= limit && sib >= uint64(r.b.off) {
		r.b.seek(int(sib))
		return
	}
	for depth := 1; depth > 0 && !r.b.bad; {
		ab := r.next()
		switch {
		case ab == nil:
			return
		case ab == &nullDIE:
			depth--
		default:
			r.skipAttrs(ab)
			if ab.children {
				depth++
			}
		}
	}
}

// treeWalk tracks the open subtrees while readInlineTree walks DIEs.
type treeWalk struct {
	tree   *inlineTree
	depth  int        // of the DIEs being read; the CU's children are 1
	inFunc int        // open subprograms
	stack  []openNode // open tree nodes, innermost last
}

// openNode is a tree node whose children are being read at depth.
type openNode struct{ node, depth int }

// open enters the children of the DIE just read, tree node n (-1 for a
// DIE outside the tree).
func (w *treeWalk) open(n int) {
	w.depth++
	if n < 0 {
		return
	}
	w.stack = append(w.stack, openNode{n, w.depth})
	if w.tree.nodes[n].physical {
		w.inFunc++
	}
}

// close leaves every open subtree deeper than depth, ending their nodes
// at the current end of the tree.
func (w *treeWalk) close(depth int) {
	w.depth = depth
	for len(w.stack) > 0 && w.stack[len(w.stack)-1].depth > depth {
		n := &w.tree.nodes[w.stack[len(w.stack)-1].node]
		n.end = int32(len(w.tree.nodes))
		if n.physical {
			w.inFunc--
		}
		w.stack = w.stack[:len(w.stack)-1]
	}
}

// treeNode reads the attributes of the DIE at off (abbreviation ab) and
// appends it to t when it is a subprogram with code, or (inside one) an
// inlined subroutine; it returns its index (-1 otherwise) and the DIE's
// DW_AT_sibling (0 if none).
func (u *unitLoader) treeNode(t *inlineTree, r *dieReader, ab *abbrev, off uint64, inFunc bool) (int, uint64) {
	physical := ab.tag == tagSubprogram
	if !physical && (ab.tag != tagInlinedSubroutine || !inFunc) {
		return -1, r.skipAttrs(ab)
	}
	var pc pcAttrs
	var sib uint64
	callFile, callLine := int64(-1), int64(0)
	specs := r.specs(ab)
	for i := range specs {
		a := &specs[i]
		switch a.attr {
		case attrLowpc:
			pc.low, pc.hasLow = r.value(a), true
		case attrHighpc:
			pc.high, pc.hasHigh = r.value(a), true
		case attrRanges:
			pc.ranges, pc.hasRanges = r.value(a), true
		case attrCallFile:
			if v := r.value(a); v.isConst() {
				callFile = int64(v.u)
			}
		case attrCallLine:
			if v := r.value(a); v.isConst() {
				callLine = int64(v.u)
			}
		case attrSibling:
			sib = r.ref(r.value(a))
		default:
			skipForm(&r.b, a.form, r.u)
		}
	}
	if r.b.bad {
		return -1, 0
	}
	rlo := len(t.ranges)
	t.ranges = u.d.rangesOf(r.u, &pc, t.ranges)
	if len(t.ranges) == rlo {
		return -1, sib // a declaration or an abstract instance: no code
	}
	i := len(t.nodes)
	n := inlNode{die: off, physical: physical, end: int32(i + 1), rlo: int32(rlo), rhi: int32(len(t.ranges)), callFile: noFile}
	if callFile >= 0 && callFile < int64(noFile) {
		n.callFile = uint32(callFile)
	}
	if callLine > 0 && callLine <= int64(^uint32(0)) {
		n.callLine = uint32(callLine)
	}
	t.nodes = append(t.nodes, n)
	if physical {
		for _, rg := range t.ranges[rlo:] {
			t.funcs = append(t.funcs, pcRange{lo: rg[0], hi: rg[1], idx: int32(i)})
		}
	}
	return i, sib
}

// holdsCode reports whether DIEs of tag may have subprograms or inlined
// subroutines among their descendants; the walk skips the subtrees of
// the others (through DW_AT_sibling where the producer wrote it), and of
// subprograms without code: lexical blocks, namespaces, modules,
// classes, structures and unions.
func holdsCode(tag uint16) bool {
	switch tag {
	case 0x0b, 0x39, 0x1e, 0x02, 0x13, 0x17:
		return true
	}
	return false
}

// nodeName returns the name of node n, resolving it on first use.
func (x *Table) nodeName(n *inlNode) funcName {
	name, ok := x.nodeNames[n.die]
	if !ok {
		name = x.own.nameAt(n.die, maxOriginHops)
		x.nodeNames[n.die] = name
	}
	return name
}

// nameAt returns the name of the function the DIE at .debug_info offset
// off is (an instance of): its demangled DW_AT_linkage_name (or
// DW_AT_MIPS_linkage_name), else the name of the DIE its
// DW_AT_abstract_origin or DW_AT_specification refers to (found the same
// way, at most hops references deep, and cached), else its DW_AT_name.
// References into other files (dwz's DW_FORM_GNU_ref_alt) are not
// followed.
func (u *unitLoader) nameAt(off uint64, hops int) funcName {
	d := u.d
	un := d.unitAt(off)
	if un == nil {
		return funcName{}
	}
	r, ok := d.newDIEReader(un, off)
	if !ok {
		return funcName{}
	}
	ab := r.next()
	if ab == nil || ab == &nullDIE {
		return funcName{}
	}
	var linkage, mips, name attrVal
	var origin, spec uint64
	specs := r.specs(ab)
	for i := range specs {
		a := &specs[i]
		switch a.attr {
		case attrLinkageName:
			linkage = r.value(a)
		case attrMIPSLinkageName:
			mips = r.value(a)
		case attrName:
			name = r.value(a)
		case attrAbstractOrigin:
			origin = r.ref(r.value(a))
		case attrSpecification:
			spec = r.ref(r.value(a))
		default:
			skipForm(&r.b, a.form, un)
		}
	}
	if r.b.bad {
		return funcName{}
	}
	for _, v := range []attrVal{linkage, mips} {
		if s := d.strOf(un, v); s != "" {
			return funcName{display: demangle.Name(s), system: s}
		}
	}
	if origin == 0 {
		origin = spec
	}
	if origin != 0 && hops > 0 {
		fn, cached := u.names[origin]
		if !cached {
			fn = u.nameAt(origin, hops-1)
			u.names[origin] = fn
		}
		if fn.system != "" {
			return fn
		}
	}
	s := d.strOf(un, name)
	return funcName{display: s, system: s}
}

// expand returns the source lines of pc in cu, innermost first: the
// inlined subroutines whose ranges hold pc, nested in the subprogram that
// holds it, and that subprogram last. The innermost gets the line table's
// line; each outer one the call site of the one inside it.
func (x *Table) expand(cu *cuLines, pc uint64, sp *span) []srcline.Line {
	file, line := cu.lineAt(pc, sp)
	t := &cu.tree
	funcBounds := func(r *pcRange) (uint64, uint64) { return r.lo, r.hi }
	fi, ok := narrowFind(sp, t.funcs, pc, funcBounds, nil)
	if !ok && x.expandAll(cu) {
		fi, ok = narrowFind(sp, t.funcs, pc, funcBounds, nil)
	}
	if !ok {
		if file == "" && line == 0 {
			return nil
		}
		return []srcline.Line{{File: file, Line: line}}
	}
	// Reading the function's children may add subprograms nested in it,
	// one of which may be the one that holds pc.
	root := int(t.funcs[fi].idx)
	for x.expandNode(cu, root) {
		if fi, ok := narrowFind(sp, t.funcs, pc, funcBounds, nil); ok {
			root = int(t.funcs[fi].idx)
		}
	}
	chain := x.chain[:0]
	lo, limit := root+1, int(t.nodes[root].end)
	if k, ok := t.kids[int32(root)]; ok {
		lo, limit = int(k[0]), int(k[1])
	}
	for i := lo; i < limit; {
		n := &t.nodes[i]
		if n.physical {
			i = max(int(n.end), i+1)
			continue
		}
		if !t.contains(n, pc) {
			for _, r := range t.ranges[n.rlo:n.rhi] {
				sp.exclude(r[0], r[1], pc)
			}
			i = max(int(n.end), i+1)
			continue
		}
		for _, r := range t.ranges[n.rlo:n.rhi] {
			if r[0] <= pc && pc < r[1] {
				sp.cut(r[0], r[1])
				break
			}
		}
		chain = append(chain, i)
		i, limit = i+1, int(n.end)
	}
	x.chain = chain
	out := make([]srcline.Line, 0, len(chain)+1)
	for k := len(chain) - 1; k >= 0; k-- {
		n := &t.nodes[chain[k]]
		name := x.nodeName(n)
		out = append(out, srcline.Line{Function: name.display, SystemName: name.system, File: file, Line: line})
		file, line = cu.file(n.callFile), int(n.callLine)
	}
	rn := &t.nodes[root]
	name := x.nodeName(rn)
	return append(out, srcline.Line{Function: name.display, SystemName: name.system, File: file, Line: line})
}
