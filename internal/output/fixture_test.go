package output

import (
	"time"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// The fixture: hand-made stacks of five processes, as the symbolizer would
// produce them.
//
//   - pids 100 and 101 run /usr/bin/app (PIE) and libc at different bases;
//     pid 100 has two threads ("app" and "worker;1");
//   - pid 200 runs /usr/bin/server with the same libc and libplain.so (no
//     build ID) as pid 100, at other bases;
//   - pids 101 and 200 have JIT code in anonymous memory at the same
//     address, holding different functions;
//   - pid 42 is a kernel thread with a comm that holds '/' and ':';
//   - pid 300 has no comm and only unnamed frames: in [vdso], in a stripped
//     library, and at an address in no mapping.

// Fixture file offsets (what a symbol + offset resolves to).
const (
	offWrite     = 0x11c574 // libc: write
	offLibcMain  = 0x29d90  // libc: __libc_start_call_main
	offMain      = 0x1189   // app: main
	offCompute   = 0x1250   // app: square inlined into scale into compute
	offFact      = 0x1290   // app: fact (recursive)
	offOdd       = 0x1300   // app: a function whose name needs sanitizing
	offPlain     = 0x2345   // libplain.so: plain_helper
	offStripped  = 0x1a2b   // libstripped.so: no symbol
	offVDSO      = 0x9d0    // [vdso]: no symbol
	offServe     = 0x1500   // server: serve
	jitAddr      = 0x7f3000000100
	noMapAddr    = 0xdead0
	hiddenKernel = 0xffffffff81300000
)

// fixtureCounts is how many times each stack is added, by name.
var fixtureCounts = []struct {
	pid   uint32
	comm  string
	stack string
	n     int
}{
	{100, "app", "write100", 3},
	{100, "worker;1", "write100", 1},
	{100, "app", "compute100", 5},
	{101, "app", "write101", 2},
	{101, "app", "jit101", 1},
	{200, "server", "jit200", 2},
	{200, "server", "write200", 1},
	{42, "kworker/0:1", "kworker", 4},
	{300, "", "unnamed300", 1},
}

// fixturePeriod is the period of every fixture sample (99 Hz), in ns.
const fixturePeriod = 10101010

type fixture struct {
	stacks   map[string]*symbolize.Stack
	mappings map[string]*symbolize.Mapping
}

func newMapping(path, buildID string, start, size, offset, inode uint64) *symbolize.Mapping {
	dev := uint64(0)
	if inode != 0 {
		dev = 0x803
	}
	return &symbolize.Mapping{Start: start, Limit: start + size, Offset: offset,
		Path: path, BuildID: buildID, Device: dev, Inode: inode}
}

// at returns the address of file offset off in m.
func at(m *symbolize.Mapping, off uint64) uint64 { return m.Start - m.Offset + off }

// fn returns a named frame at file offset off of m, in a function that
// starts at the 64-byte boundary below off.
func fn(m *symbolize.Mapping, off uint64, name, file string, line int) symbolize.Frame {
	return symbolize.Frame{Address: at(m, off), Function: name, SystemName: name, SymbolStart: at(m, off&^0x3f),
		File: file, Line: line, Mapping: m}
}

func inl(m *symbolize.Mapping, off uint64, name, file string, line int) symbolize.Frame {
	f := fn(m, off, name, file, line)
	f.Inlined = true
	return f
}

func unnamed(m *symbolize.Mapping, addr uint64, r symbolize.Reason) symbolize.Frame {
	return symbolize.Frame{Address: addr, Mapping: m, Reason: r, Kernel: m != nil && m.Kernel}
}

func kfn(k *symbolize.Mapping, addr uint64, name string) symbolize.Frame {
	return symbolize.Frame{Address: addr, Function: name, SystemName: name, SymbolStart: addr &^ 0xff, Kernel: true, Mapping: k}
}

func newFixture() *fixture {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	m := map[string]*symbolize.Mapping{
		"kernel":      {Start: 0xffffffff81000000, Limit: 0xffffffff83000000, Path: KernelFile, Kernel: true},
		"app100":      newMapping("/usr/bin/app", "a1a1a1", 0x555555555000, 0x2000, 0x1000, 11),
		"libc100":     newMapping(libc, "c0c0c0", 0x7f0000028000, 0x155000, 0x28000, 22),
		"plain100":    newMapping("/opt/lib/libplain.so", "", 0x7f0000402000, 0x10000, 0x2000, 33),
		"app101":      newMapping("/usr/bin/app", "a1a1a1", 0x560000001000, 0x2000, 0x1000, 11),
		"libc101":     newMapping(libc, "c0c0c0", 0x7f1000028000, 0x155000, 0x28000, 22),
		"jit101":      newMapping("", "", 0x7f3000000000, 0x10000, 0, 0),
		"server200":   newMapping("/usr/bin/server", "b2b2b2", 0x401000, 0x3000, 0x1000, 44),
		"libc200":     newMapping(libc, "c0c0c0", 0x7f2000028000, 0x155000, 0x28000, 22),
		"plain200":    newMapping("/opt/lib/libplain.so", "", 0x7f2000402000, 0x10000, 0x2000, 33),
		"jit200":      newMapping("", "", 0x7f3000000000, 0x10000, 0, 0),
		"vdso300":     newMapping("[vdso]", "", 0x7ffd00000000, 0x2000, 0, 0),
		"stripped300": newMapping("/opt/lib/libstripped.so", "5757", 0x7f4000001000, 0x4000, 0x1000, 55),
	}
	k := m["kernel"]
	syscall := []symbolize.Frame{
		kfn(k, 0xffffffff81200010, "vfs_write"),
		kfn(k, 0xffffffff81200110, "ksys_write"),
		kfn(k, 0xffffffff81c00020, "do_syscall_64"),
		kfn(k, 0xffffffff82000030, "entry_SYSCALL_64_after_hwframe"),
	}
	writeStack := func(app, lc *symbolize.Mapping) *symbolize.Stack {
		return stack(syscall, []symbolize.Frame{
			fn(lc, offWrite, "write", "", 0),
			fn(app, offMain, "main", "app.c", 40),
			fn(lc, offLibcMain, "__libc_start_call_main", "", 0),
		})
	}
	s := map[string]*symbolize.Stack{
		"write100": writeStack(m["app100"], m["libc100"]),
		"write101": writeStack(m["app101"], m["libc101"]),
		"compute100": stack(nil, []symbolize.Frame{
			inl(m["app100"], offCompute, "square", "app.c", 3),
			inl(m["app100"], offCompute, "scale", "app.c", 10),
			fn(m["app100"], offCompute, "compute", "app.c", 20),
			fn(m["app100"], offFact, "fact", "app.c", 30),
			fn(m["app100"], offFact, "fact", "app.c", 30),
			fn(m["plain100"], offPlain, "plain_helper", "", 0),
			mangled(fn(m["app100"], offOdd, "odd;name\n", "app.c", 50), "_Z8odd_namev"),
			fn(m["app100"], offMain, "main", "app.c", 40),
			fn(m["libc100"], offLibcMain, "__libc_start_call_main", "", 0),
		}),
		"jit101": stack(nil, []symbolize.Frame{
			{Address: jitAddr, Function: "jit_add", Mapping: m["jit101"]},
			fn(m["app101"], offMain, "main", "app.c", 40),
			fn(m["libc101"], offLibcMain, "__libc_start_call_main", "", 0),
		}),
		"jit200": stack(nil, []symbolize.Frame{
			{Address: jitAddr, Function: "jit_mul", Mapping: m["jit200"]},
			fn(m["plain200"], offPlain, "plain_helper", "", 0),
			fn(m["server200"], offServe, "serve", "server.c", 7),
			fn(m["libc200"], offLibcMain, "__libc_start_call_main", "", 0),
		}),
		"write200": stack([]symbolize.Frame{
			unnamed(k, hiddenKernel, symbolize.ReasonKernelHidden),
			kfn(k, 0xffffffff81c00020, "do_syscall_64"),
			kfn(k, 0xffffffff82000030, "entry_SYSCALL_64_after_hwframe"),
		}, []symbolize.Frame{
			fn(m["libc200"], offWrite, "write", "", 0),
			fn(m["server200"], offServe, "serve", "server.c", 7),
			fn(m["libc200"], offLibcMain, "__libc_start_call_main", "", 0),
		}),
		"kworker": stack([]symbolize.Frame{
			kfn(k, 0xffffffff81400000, "clear_page_erms"),
			kfn(k, 0xffffffff81100100, "process_one_work"),
			kfn(k, 0xffffffff81100200, "worker_thread"),
			kfn(k, 0xffffffff81100300, "kthread"),
			kfn(k, 0xffffffff82000400, "ret_from_fork"),
		}, nil),
		"unnamed300": stack(nil, []symbolize.Frame{
			unnamed(m["vdso300"], at(m["vdso300"], offVDSO), symbolize.ReasonNoSymbol),
			unnamed(m["stripped300"], at(m["stripped300"], offStripped), symbolize.ReasonNoSymbol),
			unnamed(nil, noMapAddr, symbolize.ReasonNoMapping),
		}),
	}
	return &fixture{stacks: s, mappings: m}
}

// mangled returns f with the symbol-table name sys.
func mangled(f symbolize.Frame, sys string) symbolize.Frame {
	f.SystemName = sys
	return f
}

func stack(kernel, user []symbolize.Frame) *symbolize.Stack {
	return &symbolize.Stack{Frames: append(append([]symbolize.Frame{}, kernel...), user...)}
}

// aggregate adds the fixture's samples to a new Aggregator, stack by stack.
func (fx *fixture) aggregate() *Aggregator {
	a := NewAggregator()
	for _, c := range fixtureCounts {
		for range c.n {
			add(a, c.pid, c.comm, fx.stacks[c.stack], fixturePeriod)
		}
	}
	return a
}

// fixtureSample is one sample of the fixture, as the per-sample writers
// see it.
type fixtureSample struct {
	meta  SampleMeta
	stack *symbolize.Stack
}

// fixtureStart is the time of the first fixture sample.
var fixtureStart = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

// samples returns the fixture's samples one by one, in the order of
// fixtureCounts: the k-th sample of all is taken k periods after
// fixtureStart, by thread pid+1 (pid+2 for "worker;1"), on CPU k%2.
func (fx *fixture) samples() []fixtureSample {
	var out []fixtureSample
	for _, c := range fixtureCounts {
		tid := c.pid + 1
		if c.comm == "worker;1" {
			tid++
		}
		for range c.n {
			k := len(out)
			out = append(out, fixtureSample{
				meta: SampleMeta{
					Time: fixtureStart.Add(time.Duration(k) * fixturePeriod),
					PID:  c.pid, TID: tid, CPU: uint32(k % 2), Comm: c.comm,
				},
				stack: fx.stacks[c.stack],
			})
		}
	}
	return out
}
