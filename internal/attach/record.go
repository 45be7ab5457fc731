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
	// FlagUserRegs says Regs holds the user registers and Stack the user
	// stack from Regs[7] (sp) up (CallGraphDWARF; not for kernel threads).
	FlagUserRegs = 1 << 4
	// FlagWindowFault says the stack copy ended at a page it could not
	// read: usually the unmapped page above the stack, where it ends.
	FlagWindowFault = 1 << 5
	// FlagWindowMax says the stack copy stopped at Config.StackWindow
	// bytes: the stack may go on above.
	FlagWindowMax = 1 << 6
	// FlagNoVMA says, with Config.StackBoundByVMA, that bpf_find_vma did
	// not bound the copy (no VMA held sp, or the mm lock was busy).
	FlagNoVMA = 1 << 7
	// FlagProcessFork marks a record that is not a sample: process PID
	// was forked by process ParentPID at TimeNs (Config.ReportExits), and
	// so starts with its parent's mappings. No stacks. (1 << 8 to 1 << 10
	// are the off-CPU flags.)
	FlagProcessFork = 1 << 11
	// FlagWindowTop says the stack copy stopped at the thread's stack top
	// as set by Sampler.SetStackTop (Config.StackTops): when the unwind
	// of such a sample ends at the window, the top was wrong (the thread
	// is new, or runs on another stack) and should be deleted.
	FlagWindowTop = 1 << 12
	// FlagStackSwitch says the window holds two stacks: its first
	// Sample.SwitchOff bytes were copied from Regs[7] (sp), the rest from
	// Sample.SwitchSP. The sample was taken in code that a Go function
	// (time.now, runtime.nanotime1) called after switching to the g0
	// stack, whose callers are on the goroutine's stack at SwitchSP
	// (go_switched_sp in bpf/profile.bpf.c).
	FlagStackSwitch = 1 << 13
)

// MaxStackWindow is the most bytes of user stack the BPF program can copy
// per sample (MAX_WINDOW in bpf/profile.bpf.c); Config.StackWindow is at
// most this.
const MaxStackWindow = 64 << 10

// SwitchKeep is the most bytes of the first stack a window with
// FlagStackSwitch keeps (SWITCH_KEEP in bpf/profile.bpf.c): the window
// is then at most SwitchKeep + MaxStackWindow bytes.
const SwitchKeep = 8192

// NumRegs is the number of user registers a sample records: DWARF x86-64
// register numbers 0 (rax) to 16 (rip, the return address column).
const NumRegs = 17

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
	offWinLen   = 64
	offProbe    = 68 // probe samples: the probe's index; off-CPU records (FlagOffCPU): state | blocks << 8; FlagProcessFork: the parent's tgid
	offSwitchSP = 72
	offSwitchOf = 80
	offRegs     = 88
	offData     = 224 // the stack window, then the IPs
	commLen     = 16
	maxIPsBytes = 2 * MaxStackDepth * 8
	pageSize    = 4096 // the BPF program's read slack after the window
	maxRecord   = offData + SwitchKeep + MaxStackWindow + pageSize + maxIPsBytes
)

// RecordHeaderBytes is the fixed part of a ring buffer record, in bytes
// (the offset of data in struct sample, bpf/profile.bpf.c): the stack
// window, the kernel IPs and the user IPs follow it.
const RecordHeaderBytes = offData

// Sample is one stack sample as the BPF program recorded it.
//
// KernelIPs and UserIPs are leaf first (index 0 is where the CPU was; the
// rest are return addresses). The slices (KernelIPs, UserIPs, Comm and
// Stack) are valid only during the callback that receives the Sample:
// they are reused for the next one (Stack points into the ring buffer
// record).
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
	// Probe is, for a sample taken on a probe (Config.Probes), the index
	// of that probe in Config.Probes; 0 for an event's samples.
	Probe uint32
	// ParentPID is, with FlagProcessFork, the process that forked PID;
	// 0 for other records.
	ParentPID uint32
	// Comm is the thread's name (task->comm, at most 15 bytes).
	Comm []byte
	// KernelIPs holds kernel instruction pointers, UserIPs user ones
	// (frame-pointer mode; empty with CallGraphDWARF).
	KernelIPs, UserIPs []uint64
	// Regs are the user registers at the sample by DWARF x86-64 number
	// (0 rax, 1 rdx, 2 rcx, 3 rbx, 4 rsi, 5 rdi, 6 rbp, 7 rsp, 8–15 r8–r15,
	// 16 rip), the layout of unwind.Regs; set with FlagUserRegs. For a
	// sample taken in kernel mode they are the registers saved at the
	// task's entry into the kernel (a syscall's return point).
	Regs [NumRegs]uint64
	// OffCPUState is, with FlagOffCPU, how the thread was off the CPU:
	// 'S' (sleeping), 'D' (uninterruptible) or 'R' (preempted,
	// OffCPUConfig.Runnable); 0 for other records.
	OffCPUState byte
	// OffCPUBlocks is, with FlagOffCPU, the number of blocks the record
	// stands for: 1, or the blocks summed with FlagOffCPUShort.
	OffCPUBlocks uint32
	// Stack is the user stack copied from address Regs[7] (sp) upward, to
	// the first page that did not read (FlagWindowFault) or
	// Config.StackWindow bytes (FlagWindowMax), whichever came first.
	// Empty without FlagUserRegs. With FlagStackSwitch its first
	// SwitchOff bytes are from sp and the rest from SwitchSP.
	Stack []byte
	// SwitchSP and SwitchOff are, with FlagStackSwitch, where the second
	// part of Stack was copied from and where it starts in Stack; else 0.
	SwitchSP  uint64
	SwitchOff uint32
}

// DecodeRecord fills s from one ring buffer record (the layout of struct
// sample in bpf/profile.bpf.c), reusing s's slices; s.Stack points into
// raw. Run does this for every record. It returns an error for a record
// too short for its own lengths, or with lengths that are not whole IPs.
func DecodeRecord(raw []byte, s *Sample) error {
	if len(raw) < offData {
		return fmt.Errorf("sample record of %d bytes, want at least %d", len(raw), offData)
	}
	ne := binary.NativeEndian
	klen := ne.Uint32(raw[offKLen:])
	ulen := ne.Uint32(raw[offULen:])
	wlen := ne.Uint32(raw[offWinLen:])
	switchOff := ne.Uint32(raw[offSwitchOf:])
	if klen%8 != 0 || ulen%8 != 0 || int(klen)+int(ulen) > maxIPsBytes || wlen > SwitchKeep+MaxStackWindow ||
		offData+int(wlen)+int(klen)+int(ulen) > len(raw) || switchOff > wlen || switchOff > SwitchKeep {
		return fmt.Errorf("sample record of %d bytes with a window of %d bytes and stacks of %d and %d bytes", len(raw), wlen, klen, ulen)
	}
	s.TimeNs = ne.Uint64(raw[offTime:])
	s.Period = ne.Uint64(raw[offPeriod:])
	s.CgroupID = ne.Uint64(raw[offCgroup:])
	s.PID = ne.Uint32(raw[offTgid:])
	s.TID = ne.Uint32(raw[offTid:])
	s.CPU = ne.Uint32(raw[offCPU:])
	s.Flags = ne.Uint32(raw[offFlags:])
	s.SwitchSP, s.SwitchOff = 0, 0
	if s.Flags&FlagStackSwitch != 0 {
		s.SwitchSP, s.SwitchOff = ne.Uint64(raw[offSwitchSP:]), switchOff
	}
	s.Probe, s.ParentPID, s.OffCPUState, s.OffCPUBlocks = ne.Uint32(raw[offProbe:]), 0, 0, 0
	switch aux := s.Probe; {
	case s.Flags&FlagOffCPU != 0:
		s.Probe, s.OffCPUState, s.OffCPUBlocks = 0, byte(aux), aux>>8
	case s.Flags&FlagProcessFork != 0:
		s.Probe, s.ParentPID = 0, aux
	}
	comm := raw[offComm : offComm+commLen]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	s.Comm = comm
	if s.Flags&FlagUserRegs != 0 {
		for i := range s.Regs {
			s.Regs[i] = ne.Uint64(raw[offRegs+8*i:])
		}
	} else {
		s.Regs = [NumRegs]uint64{}
	}
	ips := offData + int(wlen)
	s.Stack = raw[offData:ips:ips]
	kn, un := int(klen/8), int(ulen/8)
	s.KernelIPs = decodeIPs(s.KernelIPs[:0], raw[ips:], kn)
	s.UserIPs = decodeIPs(s.UserIPs[:0], raw[ips+kn*8:], un)
	return nil
}

func decodeIPs(dst []uint64, b []byte, n int) []uint64 {
	for i := 0; i < n; i++ {
		dst = append(dst, binary.NativeEndian.Uint64(b[i*8:]))
	}
	return dst
}
