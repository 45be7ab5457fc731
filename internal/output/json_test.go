package output

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize"
)

// The schema of JSONWriter's lines, for decoding them in tests.
type (
	jsonSampleDoc struct {
		Time       string         `json:"time"`
		TimeUnixNS int64          `json:"time_unix_ns"`
		PID        uint32         `json:"pid"`
		TID        uint32         `json:"tid"`
		Comm       string         `json:"comm"`
		CPU        uint32         `json:"cpu"`
		Frames     []jsonFrameDoc `json:"frames"`
	}
	jsonFrameDoc struct {
		Address     string          `json:"address"`
		Function    string          `json:"function"`
		SystemName  string          `json:"system_name"`
		SymbolStart string          `json:"symbol_start"`
		File        string          `json:"file"`
		Line        int             `json:"line"`
		Inlined     bool            `json:"inlined"`
		Kernel      bool            `json:"kernel"`
		Reason      string          `json:"reason"`
		Mapping     *jsonMappingDoc `json:"mapping"`
	}
	jsonMappingDoc struct {
		Path    string `json:"path"`
		BuildID string `json:"build_id"`
		Start   string `json:"start"`
		Limit   string `json:"limit"`
		Offset  string `json:"offset"`
	}
)

// wantJSONDoc is what the line of a sample must decode to.
func wantJSONDoc(m SampleMeta, st *symbolize.Stack) jsonSampleDoc {
	d := jsonSampleDoc{PID: m.PID, TID: m.TID, Comm: m.Comm, CPU: m.CPU, Frames: []jsonFrameDoc{}}
	if !m.Time.IsZero() {
		d.Time = m.Time.UTC().Format(time.RFC3339Nano)
		d.TimeUnixNS = m.Time.UnixNano()
	}
	for _, kernel := range []bool{true, false} {
		for _, f := range stackFrames(st) {
			if isKernel(&f) != kernel {
				continue
			}
			jf := jsonFrameDoc{Address: fmt.Sprintf("%#x", f.Address), Function: f.Function, File: f.File,
				Line: f.Line, Inlined: f.Inlined, Kernel: kernel}
			if f.SystemName != f.Function {
				jf.SystemName = f.SystemName
			}
			if f.SymbolStart != 0 {
				jf.SymbolStart = fmt.Sprintf("%#x", f.SymbolStart)
			}
			if f.Function == "" {
				jf.Reason = f.Reason.String()
			}
			if fm := f.Mapping; fm != nil {
				jf.Mapping = &jsonMappingDoc{Path: fm.Path, BuildID: fm.BuildID, Start: fmt.Sprintf("%#x", fm.Start),
					Limit: fmt.Sprintf("%#x", fm.Limit), Offset: fmt.Sprintf("%#x", fm.Offset)}
			}
			d.Frames = append(d.Frames, jf)
		}
	}
	return d
}

func TestJSONWriterGolden(t *testing.T) {
	var buf bytes.Buffer
	jw := NewJSONWriter(&buf)
	for _, s := range newFixture().samples() {
		if err := jw.WriteSample(s.meta, s.stack); err != nil {
			t.Fatal(err)
		}
	}
	golden(t, "fixture.jsonl", buf.Bytes())
}

// TestJSONWriterParse decodes every line and compares it with the sample
// it was written from.
func TestJSONWriterParse(t *testing.T) {
	samples := newFixture().samples()
	samples = append(samples,
		fixtureSample{SampleMeta{PID: 1, Comm: "\"q\\\x00\xff\u2028<&>"}, nil},
		fixtureSample{SampleMeta{Time: time.Unix(0, 1).In(time.FixedZone("X", 3600)), PID: 2},
			&symbolize.Stack{Frames: []symbolize.Frame{{Address: 1, Function: "f\t\"x\"", SystemName: "_Zf\x01"}}}},
	)
	var buf bytes.Buffer
	jw := NewJSONWriter(&buf)
	for _, s := range samples {
		if err := jw.WriteSample(s.meta, s.stack); err != nil {
			t.Fatal(err)
		}
	}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	i := 0
	for ; sc.Scan(); i++ {
		line := sc.Bytes()
		if i >= len(samples) {
			t.Fatalf("more lines than samples: %s", line)
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		var got jsonSampleDoc
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("line %d: %v\n%s", i, err, line)
		}
		want := wantJSONDoc(samples[i].meta, samples[i].stack)
		want.Comm = strings.ToValidUTF8(want.Comm, "\ufffd")
		for j := range want.Frames {
			want.Frames[j].SystemName = strings.ToValidUTF8(want.Frames[j].SystemName, "\ufffd")
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("line %d decodes to\n%+v\nwant\n%+v\n%s", i, got, want, line)
		}
		if got.Time != "" {
			if tm, err := time.Parse(time.RFC3339Nano, got.Time); err != nil || !tm.Equal(samples[i].meta.Time) {
				t.Errorf("line %d: time %q (%v), want %v", i, got.Time, err, samples[i].meta.Time)
			}
		}
		if bytes.ContainsAny(line, "\u2028\u2029") {
			t.Errorf("line %d holds a raw U+2028 or U+2029: %s", i, line)
		}
	}
	if i != len(samples) {
		t.Errorf("%d lines, want %d", i, len(samples))
	}
}

func TestJSONWriterError(t *testing.T) {
	errDisk := errors.New("disk full")
	err := NewJSONWriter(failWriter{errDisk}).WriteSample(SampleMeta{}, nil)
	if !errors.Is(err, errDisk) {
		t.Errorf("got error %v, want one wrapping %v", err, errDisk)
	}
}

// checkJSONString checks appendJSONString against encoding/json: the
// result must be valid JSON and decode to what json.Marshal's output
// decodes to.
func checkJSONString(t *testing.T, s string) {
	got := appendJSONString(nil, s)
	var dec, ref string
	if err := json.Unmarshal(got, &dec); err != nil {
		t.Fatalf("appendJSONString(%q) = %s: %v", s, got, err)
	}
	want, _ := json.Marshal(s)
	if err := json.Unmarshal(want, &ref); err != nil {
		t.Fatal(err)
	}
	if dec != ref {
		t.Errorf("appendJSONString(%q) = %s decodes to %q, want %q", s, got, dec, ref)
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", "\"\\/", "\x00\x01\x1f\x7f\b\f\n\r\t", "héllo 世界 🙂",
		"\xff\xfe", "a\xc3", "\u2028\u2029", "</script>", "\ufffd"} {
		checkJSONString(t, s)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00\xff", "\u2028", "世界"} {
		f.Add(s)
	}
	f.Fuzz(checkJSONString)
}
