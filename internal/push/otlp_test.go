package push

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	profpb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
	"google.golang.org/protobuf/proto"

	"github.com/gprofile/gprofile/internal/push/pushtest"
)

func TestOTLPURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"otlp://127.0.0.1:4318", "http://127.0.0.1:4318/v1development/profiles"},
		{"otlp+https://otel.example/base/", "https://otel.example/base/v1development/profiles"},
	} {
		b, err := Open(tc.url, Options{})
		if err != nil {
			t.Fatalf("Open(%s): %v", tc.url, err)
		}
		if got := b.(*otlp).url; got != tc.want {
			t.Errorf("Open(%s) posts to %s, want %s", tc.url, got, tc.want)
		}
	}
	for _, bad := range []string{"otlp://h:1/?x=1", "otlp://u:p@h:1"} {
		if _, err := Open(bad, Options{}); err == nil {
			t.Errorf("Open(%s) accepted it", bad)
		}
	}
}

// TestOTLPRequest checks the conversion on its own: the dictionary's
// zero entries, one profile per sample type, the stacks, the resource
// attributes, the build ID and the comments.
func TestOTLPRequest(t *testing.T) {
	p := parcaProfile(t, time.Unix(1700000000, 0), "main.web", 3, nil).Profile
	p.Comments = []string{"dropped 2 profiles"}
	p.Sample[0].Label = map[string][]string{"state": {"on-cpu"}}
	req := OTLPRequest(p, map[string]string{LabelServiceName: "web", "host": "h1", "kernel": "6.1", "env": "ci", "empty": ""})
	d := req.Dictionary
	if d.StringTable[0] != "" || !proto.Equal(d.MappingTable[0], &profpb.Mapping{}) || !proto.Equal(d.LocationTable[0], &profpb.Location{}) ||
		!proto.Equal(d.FunctionTable[0], &profpb.Function{}) || !proto.Equal(d.StackTable[0], &profpb.Stack{}) || !proto.Equal(d.AttributeTable[0], &profpb.KeyValueAndUnit{}) {
		t.Errorf("a dictionary table does not start with its zero value: %v", d)
	}
	pd := &profpb.ProfilesData{ResourceProfiles: req.ResourceProfiles, Dictionary: d}
	for _, st := range []struct {
		typ, unit string
		val       int64
	}{{"samples", "count", 3}, {"cpu", "nanoseconds", 3 * 10_000_000}} {
		stacks, res := pushtest.Stacks(pd, st.typ, st.unit)
		if want := fmt.Sprint(map[string]int64{"main.main;main.web": st.val}); fmt.Sprint(stacks) != want {
			t.Errorf("%s/%s stacks %v, want %s", st.typ, st.unit, stacks, want)
		}
		if want := fmt.Sprint([]map[string]string{{"service.name": "web", "host.name": "h1", "os.version": "6.1", "env": "ci"}}); fmt.Sprint(res) != want {
			t.Errorf("%s/%s resources %v, want %s", st.typ, st.unit, res, want)
		}
	}
	str := func(i int32) string { return d.StringTable[i] }
	for _, op := range req.ResourceProfiles[0].ScopeProfiles[0].Profiles {
		if op.TimeUnixNano != uint64(p.TimeNanos) || op.DurationNano != uint64(p.DurationNanos) || op.Period != p.Period ||
			str(op.PeriodType.TypeStrindex) != "cpu" || len(op.ProfileId) != 16 {
			t.Errorf("profile %s: time %d, duration %d, period %d %s, id %x; want the pprof's, a 16-byte id",
				str(op.SampleType.TypeStrindex), op.TimeUnixNano, op.DurationNano, op.Period, str(op.PeriodType.TypeStrindex), op.ProfileId)
		}
		if len(op.AttributeIndices) != 1 || d.AttributeTable[op.AttributeIndices[0]].Value.GetStringValue() != "dropped 2 profiles" {
			t.Errorf("profile %s: attributes %v, want the pprof's comment", str(op.SampleType.TypeStrindex), op.AttributeIndices)
		}
		s := op.Samples[0]
		if len(s.AttributeIndices) != 1 || str(d.AttributeTable[s.AttributeIndices[0]].KeyStrindex) != "state" {
			t.Errorf("sample attributes %v, want state", s.AttributeIndices)
		}
	}
	m := d.MappingTable[1]
	if str(m.FilenameStrindex) != "/usr/bin/work" || len(m.AttributeIndices) != 1 ||
		str(d.AttributeTable[m.AttributeIndices[0]].KeyStrindex) != OTLPBuildIDAttr || d.AttributeTable[m.AttributeIndices[0]].Value.GetStringValue() != "0123abcd" {
		t.Errorf("mapping %v: want /usr/bin/work with its build ID", m)
	}
}

// TestOTLPCollector sends profiles to a real OpenTelemetry Collector and
// reads what its file exporter wrote: the collector decoded them, and
// they hold the functions, totals and resource attributes sent.
func TestOTLPCollector(t *testing.T) {
	srv := pushtest.StartCollector(t)
	b, err := Open("otlp://"+srv.Addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{LabelServiceName: "web.service", "host": "h1", "kernel": "6.1.0-28-amd64"}
	now := time.Now()
	var sent int64
	for i, n := range []int64{3, 5, 7} {
		if err := b.Send(context.Background(), parcaProfile(t, now.Add(time.Duration(i)*10*time.Second), "main.web", n, labels)); err != nil {
			t.Fatalf("send profile %d: %v", i, err)
		}
		sent += n
	}
	var got []*profpb.ProfilesData
	for deadline := time.Now().Add(30 * time.Second); len(got) < 3 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, err = srv.Received(); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 3 {
		t.Fatalf("the collector wrote %d messages, want 3", len(got))
	}
	total := map[string]int64{}
	for _, pd := range got {
		stacks, res := pushtest.Stacks(pd, "cpu", "nanoseconds")
		for k, v := range stacks {
			total[k] += v
		}
		if len(res) != 1 || res[0]["service.name"] != "web.service" || res[0]["host.name"] != "h1" || res[0]["os.version"] != "6.1.0-28-amd64" {
			t.Errorf("resources of the cpu profiles %v, want one web.service h1 6.1.0-28-amd64", res)
		}
	}
	d := got[0].Dictionary
	buildID := ""
	for _, m := range d.GetMappingTable() {
		for _, a := range m.GetAttributeIndices() {
			if kv := d.AttributeTable[a]; d.StringTable[kv.KeyStrindex] == OTLPBuildIDAttr && d.StringTable[m.FilenameStrindex] == "/usr/bin/work" {
				buildID = pushtest.AnyString(kv.Value, d)
			}
		}
	}
	if buildID != "0123abcd" {
		t.Errorf("the collector's /usr/bin/work mapping has build ID %q, want 0123abcd", buildID)
	}
	if want := fmt.Sprint(map[string]int64{"main.main;main.web": sent * 10_000_000}); fmt.Sprint(total) != want {
		t.Errorf("the collector's cpu stacks total %v, want %s", total, want)
	}
}

// TestOTLPRefusals: the collector's refusal of a malformed request is
// permanent; a server that is not there is worth retrying.
func TestOTLPRefusals(t *testing.T) {
	srv := pushtest.StartCollector(t)
	if _, err := post(context.Background(), Options{Client: http.DefaultClient}, "http://"+srv.Addr+OTLPProfilesPath, "application/x-protobuf", []byte("\xff\xff not protobuf"), nil); !errors.Is(err, ErrPermanent) {
		t.Errorf("post(malformed) = %v, want a permanent error", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down, err := Open("otlp://"+addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = down.Send(context.Background(), parcaProfile(t, time.Now(), "main.x", 1, map[string]string{LabelServiceName: "x"}))
	if err == nil || errors.Is(err, ErrPermanent) {
		t.Errorf("Send to a closed port = %v, want an error worth retrying", err)
	}
}

// benchProfile returns a pprof the size of a whole-machine interval:
// 2000 distinct 20-frame stacks over 500 functions in 10 mappings, with
// the state label on every sample.
func benchProfile(b *testing.B) *Profile {
	b.Helper()
	var maps []*profile.Mapping
	for i := range 10 {
		maps = append(maps, &profile.Mapping{ID: uint64(i + 1), File: fmt.Sprintf("/usr/lib/lib%d.so", i), BuildID: fmt.Sprintf("%040x", i), Start: uint64(i+1) << 32, Limit: uint64(i+2) << 32})
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_101_010, TimeNanos: time.Now().UnixNano(), DurationNanos: int64(10 * time.Second),
		Mapping: maps,
	}
	for i := range 500 {
		f := &profile.Function{ID: uint64(i + 1), Name: fmt.Sprintf("func_%d", i), SystemName: fmt.Sprintf("func_%d", i)}
		m := maps[i%len(maps)]
		p.Function = append(p.Function, f)
		p.Location = append(p.Location, &profile.Location{ID: uint64(i + 1), Mapping: m, Address: m.Start + uint64(i)*64, Line: []profile.Line{{Function: f, Line: int64(i)}}})
	}
	for i := range 2000 {
		s := &profile.Sample{Value: []int64{3, 3 * p.Period}, Label: map[string][]string{"state": {"on-cpu"}}}
		for j := range 20 {
			s.Location = append(s.Location, p.Location[(i*7+j*13)%len(p.Location)])
		}
		p.Sample = append(p.Sample, s)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		b.Fatal(err)
	}
	return &Profile{Data: buf.Bytes(), Profile: p, Labels: map[string]string{LabelServiceName: "svc", "host": "h", "kernel": "6.1"}}
}

// BenchmarkEncode is the backends' share of a push: the request body
// each builds from one interval's profile (benchProfile), without the
// HTTP round trip. Parca sends the gzipped pprof as it is, in JSON;
// OTLP converts the parsed pprof into its dictionary form and marshals
// it.
func BenchmarkEncode(b *testing.B) {
	prof := benchProfile(b)
	b.Run("parca", func(b *testing.B) {
		for b.Loop() {
			body, err := json.Marshal(writeRawRequest(prof))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
		}
	})
	b.Run("otlp", func(b *testing.B) {
		for b.Loop() {
			body, err := proto.Marshal(OTLPRequest(prof.Profile, prof.Labels))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
		}
	})
}
