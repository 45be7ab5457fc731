package attach

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// TestRecordLayout checks the fixed decode offsets against the layout bpf2go
// generated from the BPF program's BTF.
func TestRecordLayout(t *testing.T) {
	var s profileSample
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"time_ns", unsafe.Offsetof(s.TimeNs), offTime},
		{"period", unsafe.Offsetof(s.Period), offPeriod},
		{"cgroup_id", unsafe.Offsetof(s.CgroupId), offCgroup},
		{"tgid", unsafe.Offsetof(s.Tgid), offTgid},
		{"tid", unsafe.Offsetof(s.Tid), offTid},
		{"cpu", unsafe.Offsetof(s.Cpu), offCPU},
		{"flags", unsafe.Offsetof(s.Flags), offFlags},
		{"kstack_len", unsafe.Offsetof(s.KstackLen), offKLen},
		{"ustack_len", unsafe.Offsetof(s.UstackLen), offULen},
		{"comm", unsafe.Offsetof(s.Comm), offComm},
		{"window_len", unsafe.Offsetof(s.WindowLen), offWinLen},
		{"probe", unsafe.Offsetof(s.Probe), offProbe},
		{"switch_sp", unsafe.Offsetof(s.SwitchSp), offSwitchSP},
		{"switch_off", unsafe.Offsetof(s.SwitchOff), offSwitchOf},
		{"regs", unsafe.Offsetof(s.Regs), offRegs},
		{"sizeof(regs)", unsafe.Sizeof(s.Regs), 8 * NumRegs},
		{"data", unsafe.Offsetof(s.Data), offData},
		{"sizeof(data)", unsafe.Sizeof(s.Data), SwitchKeep + MaxStackWindow + pageSize + maxIPsBytes},
		{"sizeof(sample)", unsafe.Sizeof(s), maxRecord},
	} {
		if c.got != c.want {
			t.Errorf("struct sample.%s at %d, decoder uses %d", c.name, c.got, c.want)
		}
	}
}

func makeRecord(comm string, kips, uips []uint64) []byte {
	return makeDWARFRecord(comm, kips, uips, nil, nil)
}

// makeDWARFRecord makes a record; regs, when not nil, sets FlagUserRegs.
func makeDWARFRecord(comm string, kips, uips []uint64, regs []uint64, window []byte) []byte {
	ne := binary.NativeEndian
	b := make([]byte, offData+len(window)+8*(len(kips)+len(uips)))
	ne.PutUint64(b[offTime:], 123456789)
	ne.PutUint64(b[offPeriod:], 10101010)
	ne.PutUint64(b[offCgroup:], 777)
	ne.PutUint32(b[offTgid:], 42)
	ne.PutUint32(b[offTid:], 43)
	ne.PutUint32(b[offCPU:], 1)
	flags := uint32(FlagUserStackError)
	if regs != nil {
		flags = FlagUserRegs
		for i, r := range regs {
			ne.PutUint64(b[offRegs+8*i:], r)
		}
	}
	ne.PutUint32(b[offFlags:], flags)
	ne.PutUint32(b[offKLen:], uint32(8*len(kips)))
	ne.PutUint32(b[offULen:], uint32(8*len(uips)))
	ne.PutUint32(b[offWinLen:], uint32(len(window)))
	copy(b[offComm:offComm+commLen], comm)
	copy(b[offData:], window)
	for i, ip := range append(append([]uint64{}, kips...), uips...) {
		ne.PutUint64(b[offData+len(window)+8*i:], ip)
	}
	return b
}

func TestDecodeRecord(t *testing.T) {
	raw := makeRecord("worker", []uint64{0xffffffff81000010, 0xffffffff81000020}, []uint64{0x401000, 0x401100, 0x401200})
	var s Sample
	if err := DecodeRecord(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.TimeNs != 123456789 || s.Period != 10101010 || s.CgroupID != 777 || s.PID != 42 || s.TID != 43 || s.CPU != 1 || s.Flags != FlagUserStackError {
		t.Errorf("header decoded as %+v", s)
	}
	if string(s.Comm) != "worker" {
		t.Errorf("comm %q", s.Comm)
	}
	if len(s.KernelIPs) != 2 || s.KernelIPs[1] != 0xffffffff81000020 {
		t.Errorf("kernel ips %x", s.KernelIPs)
	}
	if len(s.UserIPs) != 3 || s.UserIPs[0] != 0x401000 || s.UserIPs[2] != 0x401200 {
		t.Errorf("user ips %x", s.UserIPs)
	}
	// Reuse: a shorter record must not leave old IPs behind.
	if err := DecodeRecord(makeRecord("a-full-sixteen-b", nil, []uint64{7}), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.KernelIPs) != 0 || len(s.UserIPs) != 1 || string(s.Comm) != "a-full-sixteen-b" {
		t.Errorf("reused sample: kernel %x user %x comm %q", s.KernelIPs, s.UserIPs, s.Comm)
	}
}

// TestDecodeRecordDWARF: registers and the stack window come back, the
// kernel IPs after the window are found, and a record without registers
// leaves none behind from the one before.
func TestDecodeRecordDWARF(t *testing.T) {
	regs := make([]uint64, NumRegs)
	for i := range regs {
		regs[i] = uint64(0x1000 + i)
	}
	window := []byte("0123456789abcdefXYZ") // not a whole number of words
	raw := makeDWARFRecord("dw", []uint64{0xffffffff81000010}, nil, regs, window)
	var s Sample
	if err := DecodeRecord(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.Flags&FlagUserRegs == 0 || s.Regs[7] != 0x1007 || s.Regs[16] != 0x1010 {
		t.Errorf("regs decoded as %x (flags %#x)", s.Regs, s.Flags)
	}
	if string(s.Stack) != string(window) || cap(s.Stack) != len(window) {
		t.Errorf("window %q (cap %d), want %q", s.Stack, cap(s.Stack), window)
	}
	if len(s.KernelIPs) != 1 || s.KernelIPs[0] != 0xffffffff81000010 || len(s.UserIPs) != 0 {
		t.Errorf("kernel ips %x user %x", s.KernelIPs, s.UserIPs)
	}
	if err := DecodeRecord(makeRecord("fp", nil, []uint64{7}), &s); err != nil {
		t.Fatal(err)
	}
	if s.Regs != ([NumRegs]uint64{}) || len(s.Stack) != 0 {
		t.Errorf("fp record after a dwarf one: regs %x window %d bytes", s.Regs, len(s.Stack))
	}
}

// TestDecodeRecordSwitch: a window of two stacks gives where the second
// starts and its address; the fields are 0 in a record without the flag,
// whatever its bytes there.
func TestDecodeRecordSwitch(t *testing.T) {
	ne := binary.NativeEndian
	raw := makeDWARFRecord("go", nil, nil, make([]uint64, NumRegs), make([]byte, 48))
	ne.PutUint32(raw[offFlags:], FlagUserRegs|FlagStackSwitch)
	ne.PutUint64(raw[offSwitchSP:], 0xc000123400)
	ne.PutUint32(raw[offSwitchOf:], 16)
	var s Sample
	if err := DecodeRecord(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.SwitchSP != 0xc000123400 || s.SwitchOff != 16 || len(s.Stack) != 48 {
		t.Errorf("switch at %d to %#x in a window of %d bytes, want 16, 0xc000123400, 48", s.SwitchOff, s.SwitchSP, len(s.Stack))
	}
	ne.PutUint32(raw[offFlags:], FlagUserRegs)
	if err := DecodeRecord(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.SwitchSP != 0 || s.SwitchOff != 0 {
		t.Errorf("without FlagStackSwitch: switch at %d to %#x, want 0, 0", s.SwitchOff, s.SwitchSP)
	}
}

func TestDecodeRecordBad(t *testing.T) {
	good := makeRecord("x", []uint64{1}, []uint64{2, 3})
	bad := map[string][]byte{
		"short header":   good[:offData-1],
		"cut stacks":     good[:len(good)-8],
		"unaligned klen": func() []byte { b := append([]byte{}, good...); binary.NativeEndian.PutUint32(b[offKLen:], 5); return b }(),
		"huge ulen": func() []byte {
			b := append([]byte{}, good...)
			binary.NativeEndian.PutUint32(b[offULen:], 1<<31)
			return b
		}(),
		"window past the end": func() []byte {
			b := append([]byte{}, good...)
			binary.NativeEndian.PutUint32(b[offWinLen:], 16)
			return b
		}(),
		"huge window": func() []byte {
			b := make([]byte, offData+SwitchKeep+MaxStackWindow+8)
			binary.NativeEndian.PutUint32(b[offWinLen:], SwitchKeep+MaxStackWindow+8)
			return b
		}(),
		"switch past the window": func() []byte {
			b := makeDWARFRecord("dw", nil, nil, make([]uint64, NumRegs), make([]byte, 64))
			binary.NativeEndian.PutUint32(b[offFlags:], FlagUserRegs|FlagStackSwitch)
			binary.NativeEndian.PutUint32(b[offSwitchOf:], 72)
			return b
		}(),
	}
	for name, raw := range bad {
		var s Sample
		if err := DecodeRecord(raw, &s); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func BenchmarkDecodeRecord(b *testing.B) {
	raw := makeRecord("bench", make([]uint64, 20), make([]uint64, 30))
	var s Sample
	b.ReportAllocs()
	for b.Loop() {
		if err := DecodeRecord(raw, &s); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeRecord: any bytes decode or fail cleanly, and a decoded
// record's stacks fit in it.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(makeRecord("seed", []uint64{1, 2}, []uint64{3}))
	f.Add(makeRecord("", nil, nil))
	f.Add(makeDWARFRecord("dw", []uint64{1}, nil, make([]uint64, NumRegs), []byte("window")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s Sample
		if DecodeRecord(raw, &s) != nil {
			return
		}
		if offData+len(s.Stack)+8*(len(s.KernelIPs)+len(s.UserIPs)) > len(raw) || len(s.Comm) > commLen {
			t.Fatalf("decoded %d+%d IPs and comm %q from %d bytes", len(s.KernelIPs), len(s.UserIPs), s.Comm, len(raw))
		}
	})
}
