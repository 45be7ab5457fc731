package attach

import (
	"github.com/gprofile/gprofile/internal/testutil"
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	good := map[string][]int{
		"0":             {0},
		"0-3":           {0, 1, 2, 3},
		"0-1,4,6-7\n":   {0, 1, 4, 6, 7},
		" 5,1-2,2 ":     {1, 2, 5},
		"0-0":           {0},
		"2,0":           {0, 2},
		"8-10,12,14-15": {8, 9, 10, 12, 14, 15},
	}
	for in, want := range good {
		got, err := ParseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "-1", "1-", "1,,2", "99999999"} {
		if got, err := ParseCPUList(in); err == nil {
			t.Errorf("ParseCPUList(%q) = %v, want an error", in, got)
		}
	}
}

func TestOnlineCPUs(t *testing.T) {
	cpus, err := OnlineCPUs()
	if err != nil {
		testutil.Skipf(t, "no %s here: %v", OnlineCPUsPath, err)
	}
	if len(cpus) == 0 || cpus[0] < 0 {
		t.Errorf("online cpus %v", cpus)
	}
}

// TestOnlineFile: the kept-open reader gives what OnlineCPUs gives, look
// after look through one descriptor, and opens it again after close.
func TestOnlineFile(t *testing.T) {
	want, err := OnlineCPUs()
	if err != nil {
		testutil.Skipf(t, "no %s here: %v", OnlineCPUsPath, err)
	}
	var o onlineFile
	defer o.close()
	for i := range 3 {
		got, err := o.read()
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("look %d: %v, %v; want %v", i, got, err, want)
		}
		if i == 0 {
			o.close()
		}
	}
	if !o.open {
		t.Error("the descriptor was not kept open")
	}
}

// BenchmarkOnlineCPUs: a look at the online CPUs by OnlineCPUs (open,
// read, close) and by the hotplug watcher's kept-open onlineFile.
func BenchmarkOnlineCPUs(b *testing.B) {
	if _, err := OnlineCPUs(); err != nil {
		b.Skip(err)
	}
	b.Run("ReadFile", func(b *testing.B) {
		for b.Loop() {
			OnlineCPUs()
		}
	})
	b.Run("kept", func(b *testing.B) {
		var o onlineFile
		defer o.close()
		for b.Loop() {
			o.read()
		}
	})
}

func TestRingSize(t *testing.T) {
	for _, c := range []struct {
		hz     uint64
		ncpu   int
		record int
		want   int
	}{
		{99, 2, 2096, 1 << 20},
		{999, 2, 2096, 1 << 20},
		{999, 2, 2240, 2 << 20},
		{4999, 2, 2096, 8 << 20},
		{999, 2, 16 << 10, 8 << 20},
		{999, 2, 8 << 10, 4 << 20},
		{4999, 2, 8 << 10, 32 << 20},
		{999, 2, dwarfTopsRecordBytes, 1 << 20},
		{4999, 2, dwarfTopsRecordBytes, 8 << 20},
		{100000, 256, 2096, 1 << 28},
	} {
		if got := ringSize(c.hz, c.ncpu, c.record); got != c.want {
			t.Errorf("ringSize(%d Hz, %d cpus, %d-byte records) = %d, want %d", c.hz, c.ncpu, c.record, got, c.want)
		}
	}
}
