package symbolize

import (
	"cmp"
	"debug/dwarf"
	"slices"
)

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, the linkage name of
// DWARF before version 4, which GCC and older Clang still emit.
const attrMIPSLinkageName dwarf.Attr = 0x2007

// maxOriginHops bounds how many DW_AT_abstract_origin and
// DW_AT_specification references a name lookup follows.
const maxOriginHops = 4

// inlineTree is the code-bearing part of a CU's DIE tree: every
// DW_TAG_subprogram with code and every DW_TAG_inlined_subroutine, in
// pre-order.
type inlineTree struct {
	nodes []inlNode
	funcs []pcRange // subprogram ranges, sorted by lo; idx is into nodes
}

// inlNode is a subprogram (physical) or an inlined call. Its subtree is
// nodes[i+1:end].
type inlNode struct {
	ranges   [][2]uint64 // [lo, hi) address ranges
	name     funcName    // resolved from ref on first use
	ref      nameRef
	named    bool
	end      int32
	callFile uint32 // DW_AT_call_file, a file index of the CU
	callLine uint32 // DW_AT_call_line
	physical bool
}

// funcName is a function's display and system (linkage) names.
type funcName struct{ display, system string }

// nameRef is what a DIE says about its function's name, resolved only
// when an address in it is looked up: most never are.
type nameRef struct {
	linkage, plain string       // DW_AT_linkage_name (or MIPS), DW_AT_name
	origin         dwarf.Offset // DW_AT_abstract_origin or DW_AT_specification; 0 if none
}

// contains reports whether one of n's ranges holds pc.
func (n *inlNode) contains(pc uint64) bool {
	for _, r := range n.ranges {
		if r[0] <= pc && pc < r[1] {
			return true
		}
	}
	return false
}

// readInlineTree walks cu's DIEs into cu.tree. On corrupt DWARF the tree
// is dropped, and cu's addresses get no inlined frames.
func (u *unitLoader) readInlineTree(cu *cuLines) {
	t := &cu.tree
	defer func() {
		if recover() != nil {
			*t = inlineTree{}
		}
	}()
	r := u.d.Reader()
	r.Seek(cu.entry.Offset)
	if e, err := r.Next(); err != nil || e == nil || !e.Children {
		return
	}
	w := treeWalk{tree: t, depth: 1}
	for w.depth > 0 {
		e, err := r.Next()
		if err != nil {
			*t = inlineTree{} // half a tree would mislead
			return
		}
		if e == nil || isUnit(e.Tag) { // the CU's terminator is missing
			w.close(0)
			break
		}
		if e.Tag == 0 { // end of a child list
			w.close(w.depth - 1)
			continue
		}
		n := u.treeNode(t, e, w.inFunc > 0)
		switch {
		case n < 0 && !holdsCode(e.Tag):
			r.SkipChildren()
		case e.Children:
			w.open(n)
		}
	}
	slices.SortFunc(t.funcs, func(a, b pcRange) int { return cmp.Compare(a.lo, b.lo) })
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

// treeNode appends e to t when it is a subprogram with code, or (inside
// one) an inlined subroutine, and returns its index; -1 otherwise.
func (u *unitLoader) treeNode(t *inlineTree, e *dwarf.Entry, inFunc bool) int {
	physical := e.Tag == dwarf.TagSubprogram
	if !physical && (e.Tag != dwarf.TagInlinedSubroutine || !inFunc) {
		return -1
	}
	rs, err := entryRanges(u.d, e)
	if err != nil || len(rs) == 0 {
		return -1 // a declaration or an abstract instance: no code
	}
	i := len(t.nodes)
	n := inlNode{ranges: rs, ref: refOf(e), physical: physical, end: int32(i + 1)}
	if f, ok := e.Val(dwarf.AttrCallFile).(int64); ok && f >= 0 {
		n.callFile = uint32(f)
	} else {
		n.callFile = noFile
	}
	if l, ok := e.Val(dwarf.AttrCallLine).(int64); ok && l > 0 {
		n.callLine = uint32(l)
	}
	t.nodes = append(t.nodes, n)
	if physical {
		for _, r := range rs {
			if r[0] < r[1] {
				t.funcs = append(t.funcs, pcRange{lo: r[0], hi: r[1], idx: int32(i)})
			}
		}
	}
	return i
}

// entryRanges returns the address ranges of e: from DW_AT_low_pc and
// DW_AT_high_pc directly, the common case, else from d.Ranges, which
// also reads the DIE's unit entry for its base address (DW_AT_ranges).
func entryRanges(d *dwarf.Data, e *dwarf.Entry) ([][2]uint64, error) {
	var low, high uint64
	var lowOK bool
	var highField *dwarf.Field
	hasRanges := false
	for i := range e.Field {
		f := &e.Field[i]
		switch f.Attr {
		case dwarf.AttrLowpc:
			low, lowOK = f.Val.(uint64)
		case dwarf.AttrHighpc:
			highField = f
		case dwarf.AttrRanges:
			hasRanges = true
		}
	}
	if !lowOK || highField == nil || hasRanges {
		return d.Ranges(e)
	}
	switch v := highField.Val.(type) {
	case uint64:
		if highField.Class != dwarf.ClassAddress {
			return d.Ranges(e)
		}
		high = v
	case int64:
		high = low + uint64(v) // ClassConstant: an offset from low
	default:
		return d.Ranges(e)
	}
	if high <= low {
		return nil, nil
	}
	return [][2]uint64{{low, high}}, nil
}

// holdsCode reports whether DIEs of tag may have subprograms or inlined
// subroutines among their descendants; the walk skips the subtrees of
// the others (through DW_AT_sibling where the producer wrote it), and of
// subprograms without code.
func holdsCode(tag dwarf.Tag) bool {
	switch tag {
	case dwarf.TagLexDwarfBlock, dwarf.TagNamespace, dwarf.TagModule,
		dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType:
		return true
	}
	return false
}

// isUnit reports whether tag is that of a unit's root DIE.
func isUnit(tag dwarf.Tag) bool {
	switch tag {
	case dwarf.TagCompileUnit, dwarf.TagPartialUnit, dwarf.TagTypeUnit, dwarf.TagSkeletonUnit:
		return true
	}
	return false
}

// refOf returns the name attributes of e.
func refOf(e *dwarf.Entry) nameRef {
	var ref nameRef
	for _, f := range e.Field {
		switch f.Attr {
		case dwarf.AttrLinkageName, attrMIPSLinkageName:
			if s, ok := f.Val.(string); ok && s != "" && ref.linkage == "" {
				ref.linkage = s
			}
		case dwarf.AttrName:
			ref.plain, _ = f.Val.(string)
		case dwarf.AttrAbstractOrigin:
			if off, ok := f.Val.(dwarf.Offset); ok {
				ref.origin = off
			}
		case dwarf.AttrSpecification:
			if off, ok := f.Val.(dwarf.Offset); ok && ref.origin == 0 {
				ref.origin = off
			}
		}
	}
	return ref
}

// resolve returns the name ref stands for, as nameOf finds it.
func (u *unitLoader) resolve(ref nameRef) funcName {
	if ref.linkage != "" {
		return funcName{display: demangleName(ref.linkage), system: ref.linkage}
	}
	if ref.origin != 0 {
		fn, cached := u.names[ref.origin]
		if !cached {
			if e := u.entryAt(ref.origin); e != nil {
				fn = u.nameOf(e, maxOriginHops-1)
			}
			u.names[ref.origin] = fn
		}
		if fn.system != "" {
			return fn
		}
	}
	return funcName{display: ref.plain, system: ref.plain}
}

// nodeName returns the name of node n, resolving it on first use.
func (x *dwarfLines) nodeName(n *inlNode) funcName {
	if !n.named {
		n.name, n.named = x.own.resolve(n.ref), true
		n.ref = nameRef{}
	}
	return n.name
}

// nameOf returns the name of the function e is (an instance of): its
// demangled DW_AT_linkage_name (or DW_AT_MIPS_linkage_name), else the name
// of the DIE its DW_AT_abstract_origin or DW_AT_specification refers to
// (found the same way, at most hops references deep, and cached), else
// its DW_AT_name.
func (u *unitLoader) nameOf(e *dwarf.Entry, hops int) funcName {
	for _, a := range []dwarf.Attr{dwarf.AttrLinkageName, attrMIPSLinkageName} {
		if ln, ok := e.Val(a).(string); ok && ln != "" {
			return funcName{display: demangleName(ln), system: ln}
		}
	}
	off, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
	if !ok {
		off, ok = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
	}
	if ok && hops > 0 {
		fn, cached := u.names[off]
		if !cached {
			if ref := u.entryAt(off); ref != nil {
				fn = u.nameOf(ref, hops-1)
			}
			u.names[off] = fn
		}
		if fn.system != "" {
			return fn
		}
	}
	name, _ := e.Val(dwarf.AttrName).(string)
	return funcName{display: name, system: name}
}

// entryAt returns the DIE at off, or nil.
func (u *unitLoader) entryAt(off dwarf.Offset) *dwarf.Entry {
	if u.reader == nil {
		u.reader = u.d.Reader()
	}
	u.reader.Seek(off)
	e, err := u.reader.Next()
	if err != nil || e == nil || e.Offset != off {
		return nil
	}
	return e
}

// expand returns the source lines of pc in cu, innermost first: the
// inlined subroutines whose ranges hold pc, nested in the subprogram that
// holds it, and that subprogram last. The innermost gets the line table's
// line; each outer one the call site of the one inside it.
func (x *dwarfLines) expand(cu *cuLines, pc uint64) []SourceLine {
	file, line := cu.lineAt(pc)
	t := &cu.tree
	fi, ok := findRange(t.funcs, pc)
	if !ok {
		if file == "" && line == 0 {
			return nil
		}
		return []SourceLine{{File: file, Line: line}}
	}
	root := int(t.funcs[fi].idx)
	chain := x.chain[:0]
	for i, limit := root+1, int(t.nodes[root].end); i < limit; {
		n := &t.nodes[i]
		if n.physical || !n.contains(pc) {
			i = max(int(n.end), i+1)
			continue
		}
		chain = append(chain, i)
		i, limit = i+1, int(n.end)
	}
	x.chain = chain
	out := make([]SourceLine, 0, len(chain)+1)
	for k := len(chain) - 1; k >= 0; k-- {
		n := &t.nodes[chain[k]]
		name := x.nodeName(n)
		out = append(out, SourceLine{Function: name.display, SystemName: name.system, File: file, Line: line})
		file, line = cu.file(n.callFile), int(n.callLine)
	}
	rn := &t.nodes[root]
	name := x.nodeName(rn)
	return append(out, SourceLine{Function: name.display, SystemName: name.system, File: file, Line: line})
}
