package output

import (
	"encoding/binary"
	"hash/maphash"
	"strings"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// StackID identifies a stack held by one Aggregator (InternStack).
type StackID uint32

// strID is a string of an Aggregator's string table; 0 is "".
type strID uint32

// strTable interns strings (comms, cgroups, function and file names). It
// holds its own copies, so that a name does not keep alive the symbol
// table it was cut from after the symbolizer dropped that binary.
type strTable struct {
	ids  map[string]strID
	strs []string // strs[0] is ""
	last strID    // the id asked for last: a run of samples of one comm
}

// id returns the id of s, adding it on first sight.
func (t *strTable) id(s string) strID {
	if s == "" {
		return 0
	}
	if t.last != 0 && t.strs[t.last] == s {
		return t.last
	}
	if id, ok := t.ids[s]; ok {
		t.last = id
		return id
	}
	if t.ids == nil {
		t.ids, t.strs = make(map[string]strID), []string{""}
	}
	s = strings.Clone(s)
	id := strID(len(t.strs))
	t.strs = append(t.strs, s)
	t.ids[s] = id
	return id
}

// str returns the string of id.
func (t *strTable) str(id strID) string {
	if id == 0 {
		return ""
	}
	return t.strs[id]
}

// hash128 is a 128-bit hash of a content key: keys are long (names,
// paths, many frames), and a long run may hold millions of them.
type hash128 [2]uint64

// hasher hashes content keys with two seeds of its own.
type hasher struct{ seeds [2]maphash.Seed }

func (h *hasher) sum(key []byte) hash128 {
	if h.seeds == ([2]maphash.Seed{}) {
		h.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	}
	return hash128{maphash.Bytes(h.seeds[0], key), maphash.Bytes(h.seeds[1], key)}
}

// cframe is a symbolize.Frame with its strings interned (48 bytes
// instead of 112).
type cframe struct {
	addr, symStart  uint64
	mapping         *symbolize.Mapping
	fn, sys, file   strID
	line, startLine int32
	inlined, kernel bool
	reason          symbolize.Reason
	// call says that addr is a return address (callSite): the frame is
	// not the leaf of its part of the stack, kernel or user.
	call bool
}

// locTable holds each distinct location once: the frames of one address
// (inlined ones, innermost first, then the physical one), as the first
// stack that had them gave them, and whether that address is a return
// address. Location i is location i+1 of the pprof profile (BuildPprof).
type locTable struct {
	index  map[hash128]uint32
	off    chunks[uint32] // location i is frames[off[i]:off[i+1]]
	frames chunks[cframe]
}

// stackTable holds each distinct stack once, as location ids in one
// arena.
type stackTable struct {
	index map[hash128]StackID
	off   chunks[uint32] // stack i is locs[off[i]:off[i+1]]
	locs  chunks[uint32]
}

// InternStack returns the id of the stack st of process pid, to count
// its samples with AddStack. Stacks with the same frames at the same
// places get the same id, in any process: a user frame counts by its
// binary (build ID, path, device, inode) and file offset, a kernel frame
// by its address, both with their names, lines and flags; frames in
// memory that no file backs (JIT code) or in no mapping count by pid and
// address, since their addresses mean nothing elsewhere. The frames are
// copied (their strings interned); st is not kept. The first stack seen
// of a content lends its addresses and mappings to Samples: another
// process's frames at the same places are the same code, and pprof moves
// every address into its segment's first range anyway.
func (a *Aggregator) InternStack(pid uint32, st *symbolize.Stack) StackID {
	var frames []symbolize.Frame
	if st != nil {
		frames = st.Frames
	}
	ids := a.scratchIDs[:0]
	for i := 0; i < len(frames); {
		j := locationEnd(frames, i)
		ids = append(ids, a.location(pid, frames[i:j], isCallSite(frames, i)))
		i = j
	}
	a.scratchIDs = ids
	return a.InternLocations(ids)
}

// StackLocations appends the location ids of stack id (from InternStack
// or InternLocations of this Aggregator) to dst, leaf first, one per
// address of the stack as InternStack was given it (inlined frames share
// their address's location), and returns dst.
func (a *Aggregator) StackLocations(dst []uint32, id StackID) []uint32 {
	t := &a.stacks
	for i := *t.off.at(int(id)); i < *t.off.at(int(id) + 1); i++ {
		dst = append(dst, *t.locs.at(int(i)))
	}
	return dst
}

// InternLocations returns the id of the stack made of the locations ids
// (leaf first, each from StackLocations of this Aggregator): the id
// InternStack returns for a stack whose addresses have those locations,
// at the cost of one hash of 4 bytes a location.
func (a *Aggregator) InternLocations(ids []uint32) StackID {
	k := a.scratch[:0]
	for _, id := range ids {
		k = binary.NativeEndian.AppendUint32(k, id)
	}
	a.scratch = k
	t := &a.stacks
	h := a.hash.sum(k)
	if id, ok := t.index[h]; ok {
		return id
	}
	if t.index == nil {
		t.index = make(map[hash128]StackID)
	}
	id := t.add(ids)
	t.index[h] = id
	return id
}

// InternLocation returns the id of the location of frames, the frames of
// one address (its inlined frames, innermost first, then its own) at the
// leaf of a user stack of process pid, for InternLocations: the location
// InternStack gives that address there.
func (a *Aggregator) InternLocation(pid uint32, frames []symbolize.Frame) uint32 {
	return a.location(pid, frames, false)
}

// InternCallLocation is InternLocation for a return address, an address
// of a stack's part (kernel or user) that is not its leaf and not 0: the
// location InternStack gives that address there.
func (a *Aggregator) InternCallLocation(pid uint32, frames []symbolize.Frame) uint32 {
	return a.location(pid, frames, true)
}

// CountLocation adds the frames of location loc (from StackLocations) to
// st.Frames, by Reason: what symbolize.Stats counts for each frame of
// the stacks it names.
func (a *Aggregator) CountLocation(st *symbolize.Stats, loc uint32) {
	t := &a.locs
	for i := *t.off.at(int(loc)); i < *t.off.at(int(loc) + 1); i++ {
		st.Frames[t.frames.at(int(i)).reason]++
	}
}

// add appends a stack of the location ids and returns its id.
func (t *stackTable) add(ids []uint32) StackID {
	if t.off.len() == 0 {
		t.off.append(0)
	}
	for _, id := range ids {
		t.locs.append(id)
	}
	t.off.append(uint32(t.locs.len()))
	return StackID(t.off.len() - 2)
}

// location returns the id of the location of frames, which share one
// address, in process pid; call says the address is a return address.
func (a *Aggregator) location(pid uint32, frames []symbolize.Frame, call bool) uint32 {
	k := a.scratch[:0]
	if call {
		k = append(k, 'c')
	}
	for i := range frames {
		k = appendFrameKey(k, pid, &frames[i])
	}
	a.scratch = k
	t := &a.locs
	h := a.hash.sum(k)
	if id, ok := t.index[h]; ok {
		return id
	}
	if t.index == nil {
		t.index = make(map[hash128]uint32)
		t.off.append(0)
	}
	for i := range frames {
		f := &frames[i]
		t.frames.append(cframe{
			addr: f.Address, symStart: f.SymbolStart, mapping: f.Mapping,
			fn: a.strs.id(f.Function), sys: a.strs.id(f.SystemName), file: a.strs.id(f.File),
			line: int32(f.Line), startLine: int32(f.StartLine),
			inlined: f.Inlined, kernel: f.Kernel, reason: f.Reason, call: call,
		})
	}
	t.off.append(uint32(t.frames.len()))
	id := uint32(t.off.len() - 2)
	t.index[h] = id
	return id
}

// isCallSite reports whether the location that starts at frames[i] has
// a return address: it is not the leaf of its part (kernel or user) and
// its address is not 0.
func isCallSite(frames []symbolize.Frame, i int) bool {
	return i > 0 && isKernel(&frames[i]) == isKernel(&frames[i-1]) && frames[i].Address != 0
}

// appendFrameKey appends the content key of frame f of process pid.
func appendFrameKey(k []byte, pid uint32, f *symbolize.Frame) []byte {
	ne := binary.NativeEndian
	m := f.Mapping
	switch {
	case m == nil:
		k = ne.AppendUint32(append(k, 'n'), pid)
		k = ne.AppendUint64(k, f.Address)
	case m.Kernel:
		k = ne.AppendUint64(append(k, 'k'), f.Address)
	default:
		k = append(append(k, 'u'), m.BuildID...)
		k = append(append(k, 0), m.Path...)
		k = ne.AppendUint64(append(k, 0), m.Device)
		k = ne.AppendUint64(k, m.Inode)
		if m.Inode == 0 && m.BuildID == "" {
			k = ne.AppendUint32(k, pid)
		}
		k = ne.AppendUint64(k, f.Address-m.Start+m.Offset)
	}
	k = append(append(k, f.Function...), 0)
	k = append(append(k, f.SystemName...), 0)
	k = append(append(k, f.File...), 0)
	k = ne.AppendUint32(k, uint32(f.Line))
	k = ne.AppendUint32(k, uint32(f.StartLine))
	flags := byte(f.Reason) << 2
	if f.Inlined {
		flags |= 1
	}
	if f.Kernel {
		flags |= 2
	}
	return append(k, flags)
}

// frame returns the symbolize.Frame of c.
func (a *Aggregator) frame(c *cframe) symbolize.Frame {
	return symbolize.Frame{
		Address: c.addr, SymbolStart: c.symStart, Mapping: c.mapping,
		Function: a.strs.str(c.fn), SystemName: a.strs.str(c.sys), File: a.strs.str(c.file),
		Line: int(c.line), StartLine: int(c.startLine),
		Inlined: c.inlined, Kernel: c.kernel, Reason: c.reason,
	}
}
