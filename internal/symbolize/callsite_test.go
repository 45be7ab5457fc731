package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gprofile/gprofile/internal/symbolize/procmaps"

	"github.com/gprofile/gprofile/internal/symbolize/internal/symtest"
	"github.com/gprofile/gprofile/internal/testutil"
)

func TestAMD64EndsWithCall(t *testing.T) {
	for _, tc := range []struct {
		code string // hex, the bytes right before the return address
		want bool
	}{
		{"e8 10 20 30 40", true},              // call rel32
		{"90 90 e8 00 00 00 00", true},        // call rel32 after other code
		{"ff d0", true},                       // call *%rax
		{"41 ff d0", true},                    // call *%r8
		{"3e ff d2", true},                    // notrack call *%rdx
		{"3e 41 ff d3", true},                 // notrack call *%r11
		{"ff 10", true},                       // call *(%rax)
		{"41 ff 17", true},                    // call *(%r15)
		{"ff 50 10", true},                    // call *0x10(%rax)
		{"ff 14 d8", true},                    // call *(%rax,%rbx,8)
		{"ff 54 24 08", true},                 // call *0x8(%rsp)
		{"ff 15 78 56 34 12", true},           // call *0x12345678(%rip)
		{"ff 90 00 10 00 00", true},           // call *0x1000(%rax)
		{"ff 94 18 00 10 00 00", true},        // call *0x1000(%rax,%rbx,1)
		{"ff 14 c5 00 10 60 00", true},        // call *0x601000(,%rax,8)
		{"3e 41 ff 94 c4 00 01 00 00", true},  // notrack call *0x100(%r12,%rax,8)
		{"ff e0", false},                      // jmp *%rax
		{"ff 30", false},                      // push (%rax)
		{"ff 15 78 56 34", false},             // a RIP-relative call cut short
		{"ff 14 c5 00 10 60", false},          // SIB without base, disp32 cut short
		{"c3", false},                         // ret
		{"90", false},                         // nop
		{"0f 05", false},                      // syscall
		{"b8 01 02 03 04", false},             // mov $0x4030201,%eax
		{"e8 00 00 00", false},                // E8 one byte too late
		{"48 89 e5 5d c3 0f 1f 44 00", false}, // function end and padding
		{"", false},
	} {
		code, err := hex.DecodeString(strings.ReplaceAll(tc.code, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		if got := endsWithCall("amd64", code); got != tc.want {
			t.Errorf("% x: endsWithCall = %v, want %v", code, got, tc.want)
		}
	}
}

func TestARM64EndsWithCall(t *testing.T) {
	for _, tc := range []struct {
		insn uint32
		want bool
	}{
		{0x94000010, true},  // bl .+0x40
		{0x97ffffff, true},  // bl .-4
		{0xd63f0020, true},  // blr x1
		{0xd73f0822, true},  // blraa x1, x2
		{0xd73f0c22, true},  // blrab x1, x2
		{0xd63f083f, true},  // blraaz x1
		{0xd63f0c3f, true},  // blrabz x1
		{0xd61f0020, false}, // br x1
		{0xd65f03c0, false}, // ret
		{0x14000010, false}, // b .+0x40
		{0xd503201f, false}, // nop
		{0xa9bf7bfd, false}, // stp x29, x30, [sp, #-16]!
	} {
		code := binary.LittleEndian.AppendUint32([]byte{0xaa, 0xbb}, tc.insn)
		if got := endsWithCall("arm64", code); got != tc.want {
			t.Errorf("%#08x: endsWithCall = %v, want %v", tc.insn, got, tc.want)
		}
	}
	if endsWithCall("arm64", []byte{0x10, 0x00, 0x00}) {
		t.Error("3 bytes taken for an instruction")
	}
	if endsWithCall("riscv64", []byte{0xe8, 0, 0, 0, 0}) {
		t.Error("a call found for an instruction set without a decoder")
	}
}

// insn is one instruction of an objdump listing.
type insn struct {
	addr uint64
	size int
	call bool
}

// objdumpInsns disassembles the executable sections of the ELF at path
// with objdump -d; it skips the test when objdump is missing.
func objdumpInsns(t *testing.T, path string) []insn {
	t.Helper()
	objdump := symtest.LookPath(t, "objdump", "lists the call instructions of the test binary")
	out, err := exec.Command(objdump, "-d", "--insn-width=16", path).Output()
	if err != nil {
		t.Fatalf("objdump -d %s: %v", path, err)
	}
	line := regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(.*)$`)
	var insns []insn
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		addr, _ := strconv.ParseUint(m[1], 16, 64)
		size := len(strings.Fields(m[2]))
		if runtime.GOARCH == "arm64" && size == 1 { // arm64 objdump prints one 32-bit word
			size = 4
		}
		ops := strings.Fields(m[3])
		if len(ops) > 0 && (ops[0] == "notrack" || ops[0] == "bnd") {
			ops = ops[1:]
		}
		call := len(ops) > 0 && (strings.HasPrefix(ops[0], "call") || ops[0] == "bl" || strings.HasPrefix(ops[0], "blr"))
		insns = append(insns, insn{addr: addr, size: size, call: call})
	}
	return insns
}

// TestEndsWithCallGCC checks the decoder on the code gcc makes: every
// return address objdump finds after a call instruction passes; of the
// other instruction boundaries and of the addresses inside instructions,
// which are no return addresses, nearly all fail (a few may follow bytes
// that happen to encode a call).
func TestEndsWithCallGCC(t *testing.T) {
	if codeArch == "" {
		testutil.Skipf(t, "no call decoder for %s", runtime.GOARCH)
	}
	gcc := symtest.LookPath(t, "gcc", "builds testdata/calls.c")
	for _, flags := range [][]string{{"-O2"}, {"-O0"}, {"-O2", "-fno-plt", "-fPIE", "-pie"}} {
		out := filepath.Join(t.TempDir(), "calls")
		args := append(append([]string{"-g"}, flags...), "-o", out, "testdata/calls.c")
		if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, b)
		}
		calls, others, otherPass := 0, 0, 0
		code := textBytes(t, out)
		for _, in := range objdumpInsns(t, out) {
			end := in.addr + uint64(in.size)
			if in.call {
				calls++
				if !code.endsWithCall(end) {
					t.Errorf("%v: return address %#x after the call at %#x fails", flags, end, in.addr)
				}
				continue
			}
			// The end of a non-call and the bytes inside it.
			for a := in.addr + 1; a <= end; a++ {
				others++
				if code.endsWithCall(a) {
					otherPass++
				}
			}
		}
		t.Logf("%v: %d return addresses pass; %d of %d other addresses pass", flags, calls, otherPass, others)
		if calls < 10 {
			t.Errorf("%v: only %d calls found in the listing", flags, calls)
		}
		if otherPass*20 > others {
			t.Errorf("%v: %d of %d addresses that follow no call pass (more than 5%%)", flags, otherPass, others)
		}
	}
}

// textCode is the executable sections of an ELF file, by virtual address.
type textCode []*elf.Section

// textBytes reads the executable sections of the ELF at path.
func textBytes(t *testing.T, path string) textCode {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var secs textCode
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Type == elf.SHT_PROGBITS {
			data, err := s.Data()
			if err != nil {
				t.Fatal(err)
			}
			cp := *s
			cp.ReaderAt = bytes.NewReader(data)
			secs = append(secs, &cp)
		}
	}
	return secs
}

// endsWithCall runs the decoder on the bytes before the virtual address
// addr (up to maxCallLen, within its section).
func (c textCode) endsWithCall(addr uint64) bool {
	for _, s := range c {
		if addr <= s.Addr || addr > s.Addr+s.Size {
			continue
		}
		n := min(addr-s.Addr, maxCallLen)
		buf := make([]byte, n)
		if _, err := s.ReadAt(buf, int64(addr-s.Addr-n)); err != nil {
			return false
		}
		return endsWithCall(codeArch, buf)
	}
	return false
}

// TestBadReturnAddress runs the check through a Symbolizer, on a process
// that maps testdata/prog.c's binary: a return address after a call is
// good, an address inside a function that follows no call is bad, a
// function's first byte is exempt, and what cannot be read is not bad.
func TestBadReturnAddress(t *testing.T) {
	if codeArch == "" {
		testutil.Skipf(t, "no call decoder for %s", runtime.GOARCH)
	}
	bin := symtest.BuildProg(t, true)
	const pid, base = 71, 0x555555554000
	fp := newFakeProc(t)
	text := textMapping(t, bin, base)
	fp.setMaps(pid, text)
	s := fp.symbolizer("testdata/kallsyms.txt")
	defer s.Close()

	var ret, inside uint64 // in mangled: after its call of middle; after the call's first byte
	code := textBytes(t, bin)
	mangled := symtest.ElfSymbol(t, bin, "_ZN2ns7mangledEi")
	for _, in := range objdumpInsns(t, bin) {
		if in.addr >= mangled.Value && in.addr < mangled.Value+mangled.Size && in.call && ret == 0 {
			ret, inside = in.addr+uint64(in.size), in.addr+1
		}
	}
	if ret == 0 {
		t.Fatal("no call in ns::mangled")
	}
	if code.endsWithCall(inside) {
		t.Skipf("the bytes before %#x happen to encode a call", inside)
	}
	leaf := symtest.ElfSymbol(t, bin, "leaf")
	s.Stack(pid, nil, []uint64{base + leaf.Value, base + ret, base + inside, 0x10})
	for _, tc := range []struct {
		name string
		pid  uint32
		addr uint64
		want bool
	}{
		{"after a call", pid, base + ret, false},
		{"inside a call", pid, base + inside, true},
		{"at a function's start", pid, base + leaf.Value, false},
		{"one byte into a function", pid, base + leaf.Value + 1, false},
		{"in no mapping", pid, 0x10, false},
		{"unknown process", pid + 1, base + inside, false},
		{"zero", pid, 0, false},
	} {
		if got := s.BadReturnAddress(tc.pid, tc.addr); got != tc.want {
			t.Errorf("%s (%#x): BadReturnAddress = %v, want %v", tc.name, tc.addr, got, tc.want)
		}
	}
	// The verdicts are cached: they hold once the file is gone and the
	// files held open are closed.
	s.calls.close()
	s.calls.verdict = map[callKey]bool{{text.Device, text.Inode, base + inside - text.Start + text.Offset}: true}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if !s.BadReturnAddress(pid, base+inside) {
		t.Error("cached verdict not used")
	}
	if s.BadReturnAddress(pid, base+ret) {
		t.Error("an unreadable file made a return address bad")
	}
}

// TestBadReturnAddressInData: an address in a mapping that is not
// executable ([stack], [heap]) surely is no return address; one in no
// mapping at all may be a library mapped later, and is not judged.
func TestBadReturnAddressInData(t *testing.T) {
	bin := symtest.BuildProg(t, true)
	const pid, base = 9, 0x555555554000
	text := textMapping(t, bin, base)
	stack := procmaps.Entry{Start: 0x7ffd00000000, Limit: 0x7ffd00021000, Perms: "rw-p", Path: "[stack]"}
	fp := newFakeProc(t)
	fp.setMaps(pid, text, stack)
	s := fp.symbolizer("testdata/kallsyms.txt")
	s.Stack(pid, nil, []uint64{text.Start + 0x10})
	if !s.BadReturnAddress(pid, stack.Start+0x100) {
		t.Errorf("an address in [stack] passed as a return address")
	}
	if s.BadReturnAddress(pid, 0x7f0000001000) {
		t.Errorf("an address in no mapping was judged junk")
	}
}
