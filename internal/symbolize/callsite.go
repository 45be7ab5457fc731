package symbolize

import (
	"encoding/binary"
	"os"
	"runtime"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"
)

// A return address of a user stack must follow a call instruction. Frame
// pointer unwinding through code built without frame pointers (dash,
// most of a distribution's C libraries) reads other words of the stack
// as "return addresses"; when one lands in mapped code it still names a
// function, but the bytes before it are no call. BadReturnAddress reads
// those bytes from the mapped file and tells such junk apart.

// maxCallLen is the longest call instruction looked for (bytes): on
// amd64 a notrack prefix (0x3e), a REX prefix and FF /2 with a SIB byte
// and a 32-bit displacement; on arm64 4.
const maxCallLen = 9

// callCacheMax caps the verdicts cached (one per binary and return
// address); the cache is emptied when it is full.
const callCacheMax = 1 << 17

// callFilesMax caps the files held open to read code from (the most
// recently used binaries).
const callFilesMax = 16

// callKey is a return address as the file offset in one binary.
type callKey struct {
	dev, inode, offset uint64
}

// codeFile is a binary held open to read code from.
type codeFile struct {
	key binKey
	f   *os.File
}

// callSites caches the verdicts of BadReturnAddress, and the files it
// reads code from (at most callFilesMax, least recently used closed
// first). The zero value is ready to use.
type callSites struct {
	verdict map[callKey]bool // true: no call before it
	files   []codeFile       // most recently used last
	buf     [maxCallLen]byte
}

// codeArch is the instruction set of the processes profiled (ours):
// "amd64", "arm64", or "" where no call decoder exists.
var codeArch = func() string {
	switch runtime.GOARCH {
	case "amd64", "arm64":
		return runtime.GOARCH
	}
	return ""
}()

// BadReturnAddress reports whether addr, a return address (not the leaf)
// of a user stack of process pid as Stack symbolized it, surely is none:
// the bytes before it in the file the process maps there end in no call
// instruction (amd64: E8 rel32 or FF /2; arm64: BL, BLR and their
// pointer-authenticating forms). It is false whenever that cannot be
// told: an address in no known mapping of pid (but one in a mapping that
// is not executable, such as [stack] or [heap], surely is none), in
// anonymous or JIT code
// or a pseudo-file such as [vdso], a file that cannot be read (the
// process exited and the binary is not held open), another instruction
// set; and for an address at a function's first byte or the one after
// (a signal trampoline such as __restore_rt, which the kernel makes the
// return address of a signal handler, or Go's goexit+1 at the root of
// every goroutine). Verdicts are cached by binary (device and inode) and
// file offset. Call it after Stack(pid, ...), before Forget(pid).
func (s *Symbolizer) BadReturnAddress(pid uint32, addr uint64) bool {
	if codeArch == "" || addr == 0 {
		return false
	}
	s.stackMu.Lock()
	defer s.stackMu.Unlock()
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	p := s.procs.m[pid]
	if p == nil {
		return false
	}
	m := p.find(addr - 1)
	if m == nil {
		return p.inData(addr - 1) // no code there: the stack, the heap
	}
	if !m.opened || !isFilePath(m.entry.Path) || m.entry.Inode == 0 || isMemfd(m.entry.Path) && m.bin == nil {
		return false // no file, or JIT code in a memfd (which it may rewrite)
	}
	e := &m.entry
	key := callKey{dev: e.Device, inode: e.Inode, offset: addr - e.Start + e.Offset}
	if bad, ok := s.calls.verdict[key]; ok {
		return bad
	}
	bad := false
	if !m.atSymbolStart(addr) {
		code := s.calls.read(s, pid, e, key.offset)
		if code == nil {
			return false // not cached: the file may be readable later
		}
		bad = !endsWithCall(codeArch, code)
	}
	if s.calls.verdict == nil || len(s.calls.verdict) >= callCacheMax {
		s.calls.verdict = make(map[callKey]bool)
	}
	s.calls.verdict[key] = bad
	return bad
}

// atSymbolStart reports whether the process address addr is the first
// byte of a function symbol of m's binary, or the byte after it.
func (m *procMapping) atSymbolStart(addr uint64) bool {
	if m.bin == nil || !m.biasOK {
		return false
	}
	elfAddr := addr - m.bias
	sym, ok := m.bin.Lookup(elfAddr)
	return ok && elfAddr-sym.Start <= 1
}

// read returns the up to maxCallLen bytes of the file behind e (mapped
// by process pid) that end at file offset off, or nil when the file
// cannot be opened or read. The slice is valid until the next read.
func (c *callSites) read(s *Symbolizer, pid uint32, e *procmaps.Entry, off uint64) []byte {
	n := uint64(maxCallLen)
	if off < n {
		n = off
	}
	if n == 0 {
		return nil
	}
	f := c.file(s, pid, e)
	if f == nil {
		return nil
	}
	buf := c.buf[:n]
	if _, err := f.ReadAt(buf, int64(off-n)); err != nil {
		return nil
	}
	return buf
}

// file returns the open file behind e, opening it through process pid's
// view of the file system (as the symbolizer opens binaries) when it is
// not held already; nil when it cannot be opened.
func (c *callSites) file(s *Symbolizer, pid uint32, e *procmaps.Entry) *os.File {
	key := keyOf(e)
	for i := len(c.files) - 1; i >= 0; i-- {
		if cf := c.files[i]; cf.key == key {
			copy(c.files[i:], c.files[i+1:])
			c.files[len(c.files)-1] = cf
			return cf.f
		}
	}
	f, opts, err := s.openMapped(pid, e, nil)
	if err != nil {
		return nil
	}
	opts.Root.Close() // only the file itself is read
	if len(c.files) == callFilesMax {
		c.files[0].f.Close()
		c.files = append(c.files[:0], c.files[1:]...)
	}
	c.files = append(c.files, codeFile{key: key, f: f})
	return f
}

// close closes the files held open and drops the verdicts.
func (c *callSites) close() {
	for _, cf := range c.files {
		cf.f.Close()
	}
	c.files, c.verdict = nil, nil
}

// endsWithCall reports whether code, the bytes just before a return
// address (the last one right before it), ends with a call instruction
// of arch ("amd64" or "arm64").
func endsWithCall(arch string, code []byte) bool {
	switch arch {
	case "amd64":
		return amd64EndsWithCall(code)
	case "arm64":
		return arm64EndsWithCall(code)
	}
	return false
}

// amd64EndsWithCall looks for a call that ends where code ends: E8 rel32,
// or FF /2 (call near, absolute indirect) in any of its ModRM forms, 2 to
// 7 bytes. Prefixes (REX, notrack 0x3e) come before the opcode and do not
// change the length, so they need no check.
func amd64EndsWithCall(code []byte) bool {
	n := len(code)
	if n >= 5 && code[n-5] == 0xe8 {
		return true
	}
	for l := 2; l <= 7 && l <= n; l++ {
		i := n - l
		if code[i] != 0xff || (code[i+1]>>3)&7 != 2 {
			continue
		}
		if modRMLen(code[i+1:]) == l-1 {
			return true
		}
	}
	return false
}

// modRMLen returns the length of a ModRM operand (ModRM byte, SIB byte,
// displacement) in 64-bit mode from the bytes b that start with the ModRM
// byte, or 0 when b is too short to tell.
func modRMLen(b []byte) int {
	mod, rm := b[0]>>6, b[0]&7
	sib := 0
	if mod != 3 && rm == 4 {
		if len(b) < 2 {
			return 0
		}
		sib = 1
	}
	switch mod {
	case 0:
		switch {
		case rm == 5: // RIP-relative disp32
			return 5
		case sib == 1 && b[1]&7 == 5: // SIB without base: disp32
			return 6
		}
		return 1 + sib
	case 1:
		return 2 + sib
	case 2:
		return 5 + sib
	}
	return 1
}

// arm64EndsWithCall reports whether the last 4 bytes of code are BL,
// BLR, BLRAA, BLRAB, BLRAAZ or BLRABZ.
func arm64EndsWithCall(code []byte) bool {
	if len(code) < 4 {
		return false
	}
	insn := binary.LittleEndian.Uint32(code[len(code)-4:])
	switch {
	case insn&0xfc000000 == 0x94000000: // BL imm26
	case insn&0xfffffc1f == 0xd63f0000: // BLR Xn
	case insn&0xfffff800 == 0xd73f0800: // BLRAA, BLRAB Xn, Xm
	case insn&0xfffff81f == 0xd63f081f: // BLRAAZ, BLRABZ Xn
	default:
		return false
	}
	return true
}
