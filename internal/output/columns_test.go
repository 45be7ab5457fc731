package output

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// TestColumns: columns added to an Aggregator become pprof sample types
// in order, each sample with its sums, retired processes that come back
// merged; folded stacks and the top table weigh by the display column.
func TestColumns(t *testing.T) {
	fx := newFixture()
	a := NewAggregator()
	off, err := a.AddColumn(ValueType{"offcpu", "nanoseconds"})
	if err != nil {
		t.Fatal(err)
	}
	wall, err := a.AddColumn(ValueType{"wall", "nanoseconds"})
	if err != nil || off != 2 || wall != 3 || a.NumColumns() != 4 {
		t.Fatalf("columns %d, %d, %d (%v), want 2, 3, 4", off, wall, a.NumColumns(), err)
	}
	if _, err := a.AddColumn(ValueType{"wall", "count"}); err == nil {
		t.Error("a second wall column was added")
	}
	key := SampleKey{PID: 200, Comm: "server"}
	hot, write := a.InternStack(200, fx.stacks["hot200"]), a.InternStack(200, fx.stacks["write200"])
	a.AddStack(key, hot, 10) // a sample of the sampler: nothing in the new columns
	a.AddValues(key, hot, []int64{1, 10, 0, 10})
	a.AddValues(key, write, []int64{3, 0, 7000, 7000})
	a.Retire(200)
	a.sweep()
	a.Add(&Record{Key: key, Stack: write, Values: []int64{1, 0, 500, 500}})
	if _, err := a.AddColumn(ValueType{"late", "count"}); err == nil {
		t.Error("a column was added after samples")
	}

	got := a.Samples()
	want := [][]int64{{2, 20, 0, 10}, {4, 0, 7500, 7500}}
	if len(got) != 2 {
		t.Fatalf("%d samples, want 2", len(got))
	}
	for i, s := range got {
		if v := append([]int64{s.Count, s.Nanos}, s.More...); !slices.Equal(v, want[i]) {
			t.Errorf("sample %d: values %v, want %v", i, v, want[i])
		}
	}
	if tot := [...]int64{a.ColumnTotal(0), a.ColumnTotal(1), a.ColumnTotal(off), a.ColumnTotal(wall)}; tot != [...]int64{6, 20, 7500, 7510} {
		t.Errorf("totals %v", tot)
	}

	var buf bytes.Buffer
	if err := WritePprof(&buf, a, Meta{DefaultType: "wall"}); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if s := strings.Join(types, " "); s != "samples/count cpu/nanoseconds offcpu/nanoseconds wall/nanoseconds" || p.DefaultSampleType != "wall" {
		t.Errorf("sample types %s, default %s", s, p.DefaultSampleType)
	}
	for i, s := range p.Sample {
		if !slices.Equal(s.Value, want[i]) {
			t.Errorf("pprof sample %d: values %v, want %v", i, s.Value, want[i])
		}
	}
	if err := WritePprof(&buf, a, Meta{DefaultType: "nope"}); err == nil {
		t.Error("a default type that is no column was taken")
	}

	if err := a.SetDisplayColumn(wall); err != nil {
		t.Fatal(err)
	}
	if err := a.SetDisplayColumn(4); err == nil {
		t.Error("display column 4 of 4 was taken")
	}
	buf.Reset()
	if err := WriteFolded(&buf, a); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], " 10") || !strings.HasSuffix(lines[1], " 7500") {
		t.Errorf("folded by wall:\n%s", buf.String())
	}
	buf.Reset()
	if err := WriteTop(&buf, a, 10); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "Total: 7510 wall nanoseconds") {
		t.Errorf("top by wall:\n%s", buf.String())
	}
}

// TestColumnsDefaultUnchanged: an Aggregator without added columns
// writes two sample types, as before columns existed.
func TestColumnsDefaultUnchanged(t *testing.T) {
	p, _ := parsedFixture(t)
	if len(p.SampleType) != 2 || p.DefaultSampleType != "cpu" {
		t.Errorf("sample types %v, default %s", p.SampleType, p.DefaultSampleType)
	}
	for _, s := range p.Sample {
		if len(s.Value) != 2 {
			t.Fatalf("sample values %v, want 2", s.Value)
		}
	}
}

// TestEmptyKeepsColumns: Empty gives an aggregate with the same columns
// and display column, and none of the samples.
func TestEmptyKeepsColumns(t *testing.T) {
	a := NewAggregator()
	off, err := a.AddColumn(OffCPUType)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetDisplayColumn(off); err != nil {
		t.Fatal(err)
	}
	id := a.InternStack(1, &symbolize.Stack{})
	a.AddValues(SampleKey{PID: 1, Comm: "x"}, id, []int64{1, 0, 5})
	b := a.Empty()
	if b.NumColumns() != 3 || b.Columns()[0] != OffCPUType || b.display != off {
		t.Errorf("Empty: %d columns %v, display %d; want the 3 of a, display %d", b.NumColumns(), b.Columns(), b.display, off)
	}
	if b.Len() != 0 || a.Len() != 1 {
		t.Errorf("Empty has %d entries, a %d; want 0 and 1", b.Len(), a.Len())
	}
	id = b.InternStack(1, &symbolize.Stack{})
	b.AddValues(SampleKey{PID: 1, Comm: "x"}, id, []int64{1, 0, 7})
	if got := b.ColumnTotal(off); got != 7 {
		t.Errorf("Empty's off-CPU total %d after adding 7", got)
	}
}
