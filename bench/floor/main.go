// Command floor is the benchmark's lower bound for a BPF sampling profiler:
// a BPF_PROG_TYPE_PERF_EVENT program that does nothing (mov r0, 0; exit),
// attached to the cpu-clock event at the given frequency on every online
// CPU. What it costs is what any BPF profiler pays before it takes a stack:
// the timer interrupt, the perf event overflow and one BPF program run.
//
// The program is built with cilium/ebpf's asm package, so no clang is
// needed. It prints "floor: attached ..." on stderr once every CPU is
// sampling, then runs for -d seconds or until SIGINT/SIGTERM, and prints
// the program's mean run time when kernel.bpf_stats_enabled is 1.
//
// For taking gprofile's in-kernel cost apart, -stack kernel|user|both
// makes the program also take that stack with bpf_get_stack (into a
// per-CPU scratch buffer, as gprofile does) and nothing else.
//
//	sudo floor -f 999 -d 5
//	sudo floor -f 999 -d 5 -stack user
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

func main() {
	hz := flag.Uint64("f", 99, "sampling `frequency` in Hz on each CPU")
	secs := flag.Float64("d", 0, "run for this many `seconds`; 0: until SIGINT")
	stack := flag.String("stack", "none", "also take this `stack`: none, kernel, user or both")
	flag.Parse()
	if err := run(*hz, time.Duration(*secs*float64(time.Second)), *stack); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		os.Exit(1)
	}
}

func run(hz uint64, d time.Duration, stack string) error {
	if hz == 0 {
		return errors.New("frequency must be positive")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("remove memlock limit: %w", err)
	}
	insns, scratch, err := program(stack)
	if err != nil {
		return err
	}
	if scratch != nil {
		defer scratch.Close()
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "floor",
		Type:         ebpf.PerfEvent,
		Instructions: insns,
		License:      "GPL",
	})
	if err != nil {
		return fmt.Errorf("load BPF program: %w", err)
	}
	defer prog.Close()
	cpus, err := onlineCPUs()
	if err != nil {
		return err
	}
	var closers []func() error
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for _, cpu := range cpus {
		fd, err := unix.PerfEventOpen(&unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: hz,
			Bits:   unix.PerfBitFreq,
		}, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return fmt.Errorf("open cpu-clock perf event on cpu %d: %w", cpu, err)
		}
		closers = append(closers, func() error { return unix.Close(fd) })
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
		if err != nil {
			return fmt.Errorf("attach to the perf event on cpu %d: %w", cpu, err)
		}
		closers = append(closers, l.Close)
	}
	info, _ := prog.Info()
	id, _ := info.ID()
	fmt.Fprintf(os.Stderr, "floor: attached BPF program id %d to cpu-clock at %d Hz on %d CPUs\n", id, hz, len(cpus))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	<-ctx.Done()
	if st, err := prog.Stats(); err == nil && st.RunCount > 0 {
		fmt.Fprintf(os.Stderr, "floor: %d runs, %.0f ns per run\n", st.RunCount, float64(st.Runtime.Nanoseconds())/float64(st.RunCount))
	}
	return nil
}

// program returns the floor program (mov r0, 0; exit), or with stack set,
// one that also calls bpf_get_stack for that stack into a per-CPU buffer.
func program(stack string) (asm.Instructions, *ebpf.Map, error) {
	ret := asm.Instructions{asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"), asm.Return()}
	var flags []int32
	switch stack {
	case "none":
		return ret, nil, nil
	case "kernel":
		flags = []int32{0}
	case "user":
		flags = []int32{bpfFUserStack}
	case "both":
		flags = []int32{0, bpfFUserStack}
	default:
		return nil, nil, fmt.Errorf("-stack %q: want none, kernel, user or both", stack)
	}
	const bufBytes = 127 * 8 // kernel.perf_event_max_stack frames
	scratch, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: bufBytes, MaxEntries: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("create scratch map: %w", err)
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, scratch.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Reg(asm.R7, asm.R0),
	}
	for _, f := range flags {
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Reg(asm.R2, asm.R7),
			asm.Mov.Imm(asm.R3, bufBytes),
			asm.Mov.Imm(asm.R4, f),
			asm.FnGetStack.Call(),
		)
	}
	return append(insns, ret...), scratch, nil
}

const bpfFUserStack = 1 << 8 // BPF_F_USER_STACK

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	var cpus []int
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse online CPUs %q: %w", b, err)
		}
		z := a
		if found {
			if z, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parse online CPUs %q: %w", b, err)
			}
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
