package output

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
)

// encodeBoth returns p encoded by EncodePprof and by pprof's own
// WriteUncompressed.
func encodeBoth(t testing.TB, p *profile.Profile) (ours, theirs []byte) {
	t.Helper()
	var a, b bytes.Buffer
	if err := EncodePprof(&a, p); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteUncompressed(&b); err != nil {
		t.Fatal(err)
	}
	return a.Bytes(), b.Bytes()
}

// fullProfile returns a profile that sets every field profile.proto has,
// with repeated fields both short (unpacked) and long (packed).
func fullProfile() *profile.Profile {
	fnA := &profile.Function{ID: 1, Name: "a", SystemName: "_Za", Filename: "a.c", StartLine: 3}
	fnB := &profile.Function{ID: 2, Name: "b", Filename: "b.go"}
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x500000, Offset: 0x1000, File: "/bin/x", BuildID: "abcd",
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	m2 := &profile.Mapping{ID: 2, Start: 0x7f0000000000, Limit: 0x7f0000010000, File: "[vdso]"}
	l1 := &profile.Location{ID: 1, Mapping: m, Address: 0x401000, Line: []profile.Line{{Function: fnA, Line: 10, Column: 4}, {Function: fnB, Line: 20}}}
	l2 := &profile.Location{ID: 2, Mapping: m2, Address: 0x7f0000000100, IsFolded: true}
	l3 := &profile.Location{ID: 300, Line: []profile.Line{{Function: fnB, Line: -1}}}
	return &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}, {Type: "wall", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{l1}, Value: []int64{1, 10, -5},
				Label:    map[string][]string{"comm": {"x"}, "pid": {"7", "8"}, "": {""}},
				NumLabel: map[string][]int64{"bytes": {4096, -1}, "n": {3}}, NumUnit: map[string][]string{"bytes": {"bytes", ""}}},
			{Location: []*profile.Location{l1, l2, l3}, Value: []int64{2, 20, 0}},
			{Location: []*profile.Location{l2, l3}, Value: []int64{0, 1 << 40, 1}, Label: map[string][]string{"comm": {"y"}, "empty": nil}},
			{Value: []int64{1, 1, 1}},
		},
		Mapping:           []*profile.Mapping{m, m2},
		Location:          []*profile.Location{l1, l2, l3},
		Function:          []*profile.Function{fnA, fnB},
		DropFrames:        "drop.*",
		KeepFrames:        "keep",
		TimeNanos:         1700000000000000000,
		DurationNanos:     8e9,
		PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:            1001001,
		Comments:          []string{"one", "two", "three"},
		DefaultSampleType: "cpu",
		DocURL:            "https://example.com/doc",
	}
}

// TestEncodePprofMatches: EncodePprof writes the bytes pprof's
// WriteUncompressed writes, for a profile with every field set, for
// variants with fields left empty (a nil or empty period type, two
// comments, none), and for BuildPprof's profile of benchAggregate (per-
// process labels, kernel and user mappings, inlined frames).
func TestEncodePprofMatches(t *testing.T) {
	profiles := map[string]*profile.Profile{"full": fullProfile(), "empty": {}}
	p := fullProfile()
	p.PeriodType, p.Comments, p.DocURL, p.DefaultSampleType = nil, []string{"a", "b"}, "", ""
	profiles["sparse"] = p
	p = fullProfile()
	p.PeriodType, p.Comments = &profile.ValueType{}, nil
	profiles["zero period type"] = p
	built, err := BuildPprof(benchAggregate(), Meta{Labels: []string{LabelPID, LabelTID, LabelComm}})
	if err != nil {
		t.Fatal(err)
	}
	profiles["benchAggregate"] = built
	for name, p := range profiles {
		ours, theirs := encodeBoth(t, p)
		if !bytes.Equal(ours, theirs) {
			n := 0
			for n < min(len(ours), len(theirs)) && ours[n] == theirs[n] {
				n++
			}
			t.Errorf("%s: %d bytes, pprof's %d; they differ from byte %d", name, len(ours), len(theirs), n)
			continue
		}
		if _, err := profile.ParseData(ours); err != nil {
			t.Errorf("%s: pprof cannot read it back: %v", name, err)
		}
	}
}

// FuzzEncodePprof: for any profile pprof reads, EncodePprof writes the
// bytes WriteUncompressed writes.
func FuzzEncodePprof(f *testing.F) {
	var b bytes.Buffer
	if err := fullProfile().WriteUncompressed(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := profile.ParseData(data)
		if err != nil {
			return
		}
		var theirs bytes.Buffer
		if !func() (ok bool) {
			defer func() { ok = recover() == nil }() // pprof's own encoder may refuse it by a panic
			p.WriteUncompressed(&theirs)
			return
		}() {
			t.Skip("WriteUncompressed panicked")
		}
		var ours bytes.Buffer
		if err := EncodePprof(&ours, p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours.Bytes(), theirs.Bytes()) {
			t.Fatalf("EncodePprof wrote %d bytes, WriteUncompressed %d, different", ours.Len(), theirs.Len())
		}
	})
}
