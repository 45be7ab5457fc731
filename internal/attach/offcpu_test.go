package attach

import (
	"bufio"
	"context"
	"os/exec"
	"reflect"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/testutil"
)

// TestOffCPURecordLayout: the off-CPU object's record is the sampler's,
// field for field, so that one decoder reads both.
func TestOffCPURecordLayout(t *testing.T) {
	p, o := reflect.TypeOf(profileSample{}), reflect.TypeOf(offcpuSample{})
	if p.Size() != o.Size() || p.NumField() != o.NumField() {
		t.Fatalf("off-CPU record is %d bytes in %d fields, the sampler's %d in %d", o.Size(), o.NumField(), p.Size(), p.NumField())
	}
	for i := range p.NumField() {
		pf, of := p.Field(i), o.Field(i)
		if pf.Name != of.Name || pf.Offset != of.Offset || pf.Type.Size() != of.Type.Size() {
			t.Errorf("field %d: off-CPU %s at %d (%d bytes), sampler %s at %d (%d bytes)", i, of.Name, of.Offset, of.Type.Size(), pf.Name, pf.Offset, pf.Type.Size())
		}
	}
}

// startOffCPUWorkload starts testdata/offcpu.c in mode for secs seconds
// and waits for its "ready".
func startOffCPUWorkload(t *testing.T, mode, secs string) *exec.Cmd {
	t.Helper()
	bin := testutil.BuildC(t, "testdata/offcpu.c", "-O2", "-g", "-pthread", "-fno-omit-frame-pointer")
	cmd := exec.Command(bin, mode, secs)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("workload said %q, %v", line, err)
	}
	return cmd
}

// TestOffCPUSampler records a thread that alternates 50 ms of spinning
// with 50 ms of nanosleep through the real programs: its blocks come as
// off-CPU records of state S, about 50 ms each, with kernel and user
// stacks, and its CPU samples keep coming beside them.
func TestOffCPUSampler(t *testing.T) {
	testutil.RequirePrivileges(t)
	cmd := startOffCPUWorkload(t, "alternate", "30")
	pid := uint32(cmd.Process.Pid)
	s, err := Open(Config{FrequencyHz: 499, PIDs: []uint32{pid}, SoftwareEvent: true, OffCPU: &OffCPUConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var cpuNs, offNs, blocks, withStacks, other, ongoing int64
	err = s.Run(ctx, func(smp *Sample) {
		if smp.PID != pid {
			other++
			return
		}
		if smp.Flags&FlagOffCPU == 0 {
			cpuNs += int64(smp.Period)
			return
		}
		if smp.OffCPUState != 'S' {
			t.Errorf("off-CPU record of state %q, want S", smp.OffCPUState)
		}
		if smp.Flags&FlagOffCPUOngoing != 0 {
			ongoing++
		}
		offNs += int64(smp.Period)
		blocks += int64(smp.OffCPUBlocks)
		if smp.Flags&FlagOffCPUShort == 0 && len(smp.KernelIPs) > 3 && len(smp.UserIPs) > 2 {
			withStacks++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.OffCPUCounters()
	t.Logf("cpu %v, off %v in %d blocks (%d with stacks, %d ongoing), counters %+v", time.Duration(cpuNs), time.Duration(offNs), blocks, withStacks, ongoing, c)
	if other != 0 {
		t.Errorf("%d records of other processes", other)
	}
	if blocks < 10 || withStacks < 10 {
		t.Errorf("%d blocks, %d with both stacks in 2 s of 50 ms sleeps", blocks, withStacks)
	}
	if offNs < int64(600*time.Millisecond) {
		t.Errorf("%v off CPU in 2 s of half sleeping", time.Duration(offNs))
	}
}
