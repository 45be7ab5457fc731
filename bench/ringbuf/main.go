// Command ringbuf measures how many ring buffer records per second a
// consumer sustains without loss: a bare cilium/ebpf ringbuf.Reader loop
// that only counts records, against gprofile's recorder (internal/recorder
// over the same ring: decode the record, hand it to the worker goroutine,
// look its stack up in the memo, symbolize it on first sight, aggregate).
//
// The records are synthetic but shaped like gprofile's (bpf/profile.bpf.c
// struct sample): a BPF program written with cilium/ebpf's asm package,
// attached to cpu-clock at 1000 Hz on CPU 0, writes K records per run,
// each copied from one of 256 templates holding a real 22-frame user stack
// of the running workload (so symbolization is real). It uses gprofile's
// wakeup policy (no wakeup until a quarter of the ring is full) and the
// reader polls every 100 ms like internal/attach. The workload keeps CPU 0
// busy (a cpu-clock event does not fire at its rate on an idle CPU); the
// consumer (this process) is pinned to CPU 1.
//
//	sudo ringbuf -workload ./workload -o ringbuf.md
package main

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	gpattach "github.com/gprofile/gprofile/internal/attach"
	"github.com/gprofile/gprofile/internal/recorder"
	"golang.org/x/sys/unix"
)

const (
	genHz     = 1000    // generator runs per second
	ringBytes = 4 << 20 // ring buffer size
	templates = 256
)

func main() {
	workload := flag.String("workload", "", "workload binary (bench/workload.c)")
	out := flag.String("o", "", "write the markdown table to `file` (default stdout)")
	secs := flag.Float64("d", 2, "`seconds` per step")
	steps := flag.String("k", "100,200,400,800", "records per generator run (at most 1000), one step each (×1000/s)")
	flag.Parse()
	if err := run(*workload, *out, *steps, time.Duration(*secs*float64(time.Second))); err != nil {
		fmt.Fprintf(os.Stderr, "ringbuf: %v\n", err)
		os.Exit(1)
	}
}

type stepResult struct {
	consumer          string
	k                 int
	offered, consumed uint64
	failed            uint64
	secs, cpu         float64
}

func run(workload, out, steps string, d time.Duration) error {
	if workload == "" {
		return errors.New("-workload is required")
	}
	if runtime.NumCPU() < 2 {
		return errors.New("needs 2 CPUs: one for the generator, one for the consumer")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	// The consumer (every thread of this process) runs on CPU 1, the
	// workload and the generator on CPU 0.
	if err := pinProcess(1); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	// The workload keeps CPU 0 busy and is the process the stacks belong to.
	w := exec.Command("taskset", "-c", "0", workload, "3600", "1")
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start workload: %w", err)
	}
	defer func() {
		syscall.Kill(-w.Process.Pid, syscall.SIGKILL)
		w.Wait()
	}()
	time.Sleep(300 * time.Millisecond)
	pid := uint32(w.Process.Pid) // taskset execs the workload: same pid
	tmpl, err := buildTemplates(pid)
	if err != nil {
		return err
	}
	var results []stepResult
	for _, ks := range strings.Split(steps, ",") {
		var k int
		if _, err := fmt.Sscan(ks, &k); err != nil || k <= 0 || k > 1000 {
			return fmt.Errorf("bad step %q", ks)
		}
		for _, c := range []string{"bare", "gprofile"} {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := step(c, k, tmpl, d)
			if err != nil {
				return fmt.Errorf("%s at %d records/run: %w", c, k, err)
			}
			fmt.Fprintf(os.Stderr, "ringbuf: %-8s offered %7.0f/s consumed %7.0f/s lost %.2f%% cpu %.0f%%\n",
				c, float64(r.offered)/r.secs, float64(r.consumed)/r.secs, 100*float64(r.failed)/float64(max(r.offered, 1)), 100*r.cpu/r.secs)
			results = append(results, r)
		}
	}
	return writeTable(out, results, d)
}

func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signalNotify(ch)
	go func() {
		select {
		case <-ch:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// step runs the generator at k records per run against one consumer.
func step(consumer string, k int, tmpl [][]byte, d time.Duration) (stepResult, error) {
	res := stepResult{consumer: consumer, k: k}
	events, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: ringBytes})
	if err != nil {
		return res, fmt.Errorf("create ring buffer: %w", err)
	}
	defer events.Close()
	tm, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: uint32(len(tmpl[0])), MaxEntries: templates})
	if err != nil {
		return res, err
	}
	defer tm.Close()
	for i, t := range tmpl {
		if err := tm.Put(uint32(i), t); err != nil {
			return res, err
		}
	}
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 1})
	if err != nil {
		return res, err
	}
	defer counts.Close()
	prog, err := generator(k, len(tmpl[0]), events, tm, counts)
	if err != nil {
		return res, err
	}
	defer prog.Close()
	rd, err := ringbuf.NewReader(events)
	if err != nil {
		return res, err
	}
	defer rd.Close()

	var rec *recorder.Recorder
	var src *ringSource
	if consumer == "gprofile" {
		if rec, src, err = newGprofile(rd); err != nil {
			return res, err
		}
		defer rec.Close()
	}
	type done struct {
		n   uint64
		cpu float64
		err error
	}
	fin := make(chan done, 1)
	go func() {
		var n uint64
		var err error
		t0 := processCPU()
		if consumer == "bare" {
			n, err = bareLoop(rd)
		} else {
			n, err = gprofileLoop(rec, src)
		}
		fin <- done{n, processCPU() - t0, err}
	}()
	fd, l, err := attach(prog)
	if err != nil {
		rd.Close()
		<-fin
		return res, err
	}
	start := time.Now()
	time.Sleep(d)
	l.Close()
	unix.Close(fd)
	res.secs = time.Since(start).Seconds()
	rd.Flush()
	r := <-fin
	if r.err != nil {
		return res, r.err
	}
	var c [2]uint64
	if err := counts.Lookup(uint32(0), &c); err != nil {
		return res, err
	}
	res.offered, res.failed, res.consumed, res.cpu = c[0], c[1], r.n, r.cpu
	return res, nil
}

// processCPU returns the process's CPU time in seconds: the consumer's
// goroutines, and the GC; the generator runs in BPF on CPU 0, charged to
// the workload.
func processCPU() float64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// pinProcess puts every thread of this process on cpu; threads made
// later inherit it from the thread that makes them.
func pinProcess(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		var tid int
		if _, err := fmt.Sscan(t.Name(), &tid); err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pin thread %d to cpu %d: %w", tid, cpu, err)
		}
	}
	return nil
}

func attach(prog *ebpf.Program) (int, link.Link, error) {
	fd, err := unix.PerfEventOpen(&unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: genHz,
		Bits:   unix.PerfBitFreq,
	}, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, nil, fmt.Errorf("open cpu-clock on cpu 0: %w", err)
	}
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, l, nil
}

// generator builds the BPF program: k times, pick a template at random,
// output it with gprofile's wakeup policy, count the attempt and any
// failure (ring full) in counts[0] = {attempts, failures}.
func generator(k, size int, events, tmpl, counts *ebpf.Map) (*ebpf.Program, error) {
	const (
		rbAvailData  = 0
		rbNoWakeup   = 1
		rbForceWakup = 2
	)
	insns := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Reg(asm.R6, asm.R0),
	}
	for i := 0; i < k; i++ {
		wake, ok := fmt.Sprintf("wake%d", i), fmt.Sprintf("ok%d", i)
		failed := asm.StoreXAdd(asm.R6, asm.R1, asm.DWord)
		failed.Offset = 8
		insns = append(insns,
			asm.FnGetPrandomU32.Call(),
			asm.And.Imm(asm.R0, templates-1),
			asm.StoreMem(asm.RFP, -8, asm.R0, asm.Word),
			asm.LoadMapPtr(asm.R1, tmpl.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "exit"),
			asm.Mov.Reg(asm.R7, asm.R0),
			asm.LoadMapPtr(asm.R1, events.FD()),
			asm.Mov.Imm(asm.R2, rbAvailData),
			asm.FnRingbufQuery.Call(),
			asm.Mov.Imm(asm.R8, rbNoWakeup),
			asm.JLT.Imm(asm.R0, ringBytes/4, wake),
			asm.Mov.Imm(asm.R8, rbForceWakup),
			asm.LoadMapPtr(asm.R1, events.FD()).WithSymbol(wake),
			asm.Mov.Reg(asm.R2, asm.R7),
			asm.Mov.Imm(asm.R3, int32(size)),
			asm.Mov.Reg(asm.R4, asm.R8),
			asm.FnRingbufOutput.Call(),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R6, asm.R1, asm.DWord),
			asm.JEq.Imm(asm.R0, 0, ok),
			failed,
			asm.Mov.Imm(asm.R0, 0).WithSymbol(ok),
		)
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"), asm.Return())
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "rbgen", Type: ebpf.PerfEvent, Instructions: insns, License: "GPL"})
	if err != nil {
		return nil, fmt.Errorf("load generator: %w", err)
	}
	return prog, nil
}

// buildTemplates makes gprofile-shaped records of pid's stack: leaf,
// chain1..chain20, spin; the leaf address differs between templates.
func buildTemplates(pid uint32) ([][]byte, error) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	f, err := elf.Open(exe)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	addr := map[string]elf.Symbol{}
	for _, s := range syms {
		addr[s.Name] = s
	}
	base, err := loadBase(pid, f)
	if err != nil {
		return nil, err
	}
	names := []string{"leaf"}
	for i := 1; i <= 20; i++ {
		names = append(names, fmt.Sprintf("chain%d", i))
	}
	names = append(names, "spin")
	// The layout of struct sample in bpf/profile.bpf.c (attach.DecodeRecord
	// reads it; its test checks the offsets against the BPF object).
	const hdr = gpattach.RecordHeaderBytes // the IPs follow the registers and an empty stack window
	size := hdr + 8*len(names)
	var out [][]byte
	ne := binary.NativeEndian
	for t := 0; t < templates; t++ {
		b := make([]byte, size)
		ne.PutUint64(b[8:], 1e9/genHz)             // period
		ne.PutUint32(b[24:], pid)                  // tgid
		ne.PutUint32(b[28:], pid)                  // tid
		ne.PutUint32(b[44:], uint32(8*len(names))) // ustack_len
		copy(b[48:64], "workload")
		for i, n := range names {
			s, ok := addr[n]
			if !ok {
				return nil, fmt.Errorf("%s has no symbol %s", exe, n)
			}
			off := uint64(4) // a return address inside the function
			if i == 0 {
				off = uint64(t) % max(s.Size, 1)
			}
			ne.PutUint64(b[hdr+8*i:], base+s.Value+off)
		}
		out = append(out, b)
	}
	return out, nil
}

// loadBase returns the address the ELF file's vaddr 0 is mapped at: the
// start of its offset-0 mapping minus the first PT_LOAD's vaddr.
func loadBase(pid uint32, f *elf.File) (uint64, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0, err
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	var firstVaddr uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			firstVaddr = p.Vaddr &^ (p.Align - 1)
			break
		}
	}
	for _, line := range strings.Split(string(maps), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 6 || fs[5] != exe || fs[2] != "00000000" {
			continue
		}
		var start uint64
		fmt.Sscanf(fs[0], "%x-", &start)
		return start - firstVaddr, nil
	}
	return 0, fmt.Errorf("no mapping of %s in process %d", exe, pid)
}
