package main

import (
	"encoding/binary"
	"hash/maphash"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// stackEntry is what the collector keeps per raw stack of a process.
type stackEntry struct {
	// st holds this process's frames, addresses as sampled: for the
	// per-sample text and JSON output.
	st *symbolize.Stack
	// canon is shared by every process whose stack has the same frames at
	// the same file offsets of the same binaries: what the aggregator
	// keeps, so that many processes of one program (or one process after
	// another) cost one copy of the frames.
	canon *symbolize.Stack
}

// canonical returns the stack that stands for st in the aggregate: the
// first stack seen with the same content. Content is, per frame, the
// binary (build ID, path, device, inode), the file offset, the names and
// lines and flags; addresses in anonymous memory (JIT code) and outside
// any mapping also count the pid, since they mean nothing elsewhere.
func (c *collector) canonical(pid uint32, st *symbolize.Stack) *symbolize.Stack {
	k := c.ckey[:0]
	for i := range st.Frames {
		f := &st.Frames[i]
		k = appendFrameKey(k, pid, f)
	}
	c.ckey = k
	// The key is hashed to 128 bits: keys are long (names, paths), and
	// there may be millions of stacks in a long run.
	h := contentHash{maphash.Bytes(c.seeds[0], k), maphash.Bytes(c.seeds[1], k)}
	if canon, ok := c.canon[h]; ok {
		return canon
	}
	c.canon[h] = st
	return st
}

// contentHash is a 128-bit hash of a stack's content key.
type contentHash [2]uint64

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
	flags := byte(f.Reason) << 2
	if f.Inlined {
		flags |= 1
	}
	if f.Kernel {
		flags |= 2
	}
	return append(k, flags)
}

// trimJunk cuts the user part of st after its first frame in no mapping:
// frame-pointer unwinding through code built without frame pointers reads
// garbage "return addresses", and every one after the first is noise that
// would make each stack unique. It returns st itself when there is nothing
// to cut, else a trimmed copy.
func trimJunk(st *symbolize.Stack) *symbolize.Stack {
	for i := range st.Frames {
		f := &st.Frames[i]
		if !f.Kernel && f.Reason == symbolize.ReasonNoMapping && i+1 < len(st.Frames) {
			return &symbolize.Stack{Frames: st.Frames[: i+1 : i+1]}
		}
	}
	return st
}
