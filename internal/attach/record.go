package attach

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// MaxStackDepth is the most frames the BPF program takes from each of the
// kernel and the user stack: the kernel's default kernel.perf_event_max_stack.
const MaxStackDepth = 127

// Record flags set by the BPF program (struct sample.flags).
const (
	FlagKernelStackError = 1 << 0 // bpf_get_stack failed for the kernel stack
	FlagUserStackError   = 1 << 1 // bpf_get_stack failed for the user stack
	// FlagProcessExit marks a record that is not a sample: process PID
	// ended at TimeNs (Config.ReportExits). It has no stacks.
	FlagProcessExit = 1 << 2
	// FlagProcessExec marks a record that is not a sample: process PID
	// exec'd a new program at TimeNs (Config.ReportExits). No stacks.
	FlagProcessExec = 1 << 3
)

// Offsets of struct sample in bpf/profile.bpf.c; TestRecordLayout checks
// them against the BTF-generated profileSample.
const (
	offTime     = 0
	offPeriod   = 8
	offCgroup   = 16
	offTgid     = 24
	offTid      = 28
	offCPU      = 32
	offFlags    = 36
	offKLen     = 40
	offULen     = 44
	offComm     = 48
	offIPs      = 64
	commLen     = 16
	maxIPsBytes = 2 * MaxStackDepth * 8
)

// Sample is one stack sample as the BPF program recorded it.
//
// KernelIPs and UserIPs are leaf first (index 0 is where the CPU was; the
// rest are return addresses). Both slices, and Comm, are valid only during
// the callback that receives the Sample: they are reused for the next one.
type Sample struct {
	// TimeNs is bpf_ktime_get_ns() at the sample: CLOCK_MONOTONIC, ns.
	TimeNs uint64
	// Period is the event's sample period at this sample: ns for cpu-clock,
	// cycles for the cycles event. In frequency mode the kernel adjusts it.
	Period uint64
	// CgroupID is the cgroup v2 id of the task (the inode number of its
	// directory under /sys/fs/cgroup).
	CgroupID uint64
	// PID is the process id (tgid), TID the thread id; 0 for the idle task.
	PID, TID uint32
	// CPU is the CPU the sample was taken on.
	CPU uint32
	// Flags holds FlagKernelStackError and FlagUserStackError.
	Flags uint32
	// Comm is the thread's name (task->comm, at most 15 bytes).
	Comm []byte
	// KernelIPs holds kernel instruction pointers, UserIPs user ones.
	KernelIPs, UserIPs []uint64
}

// DecodeRecord fills s from one ring buffer record (the layout of struct
// sample in bpf/profile.bpf.c), reusing s's slices; Run does this for
// every record. It returns an error for a record too short for its own
// stack lengths, or with lengths that are not whole IPs.
func DecodeRecord(raw []byte, s *Sample) error {
	if len(raw) < offIPs {
		return fmt.Errorf("sample record of %d bytes, want at least %d", len(raw), offIPs)
	}
	ne := binary.NativeEndian
	klen := ne.Uint32(raw[offKLen:])
	ulen := ne.Uint32(raw[offULen:])
	if klen%8 != 0 || ulen%8 != 0 || int(klen)+int(ulen) > maxIPsBytes || offIPs+int(klen)+int(ulen) > len(raw) {
		return fmt.Errorf("sample record of %d bytes with stacks of %d and %d bytes", len(raw), klen, ulen)
	}
	s.TimeNs = ne.Uint64(raw[offTime:])
	s.Period = ne.Uint64(raw[offPeriod:])
	s.CgroupID = ne.Uint64(raw[offCgroup:])
	s.PID = ne.Uint32(raw[offTgid:])
	s.TID = ne.Uint32(raw[offTid:])
	s.CPU = ne.Uint32(raw[offCPU:])
	s.Flags = ne.Uint32(raw[offFlags:])
	comm := raw[offComm : offComm+commLen]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	s.Comm = comm
	kn, un := int(klen/8), int(ulen/8)
	s.KernelIPs = decodeIPs(s.KernelIPs[:0], raw[offIPs:], kn)
	s.UserIPs = decodeIPs(s.UserIPs[:0], raw[offIPs+kn*8:], un)
	return nil
}

func decodeIPs(dst []uint64, b []byte, n int) []uint64 {
	for i := 0; i < n; i++ {
		dst = append(dst, binary.NativeEndian.Uint64(b[i*8:]))
	}
	return dst
}
