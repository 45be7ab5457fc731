package push

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/push/pushtest"
)

func TestParcaLabels(t *testing.T) {
	got := ParcaLabels(map[string]string{
		LabelServiceName: "web.service", "host": "h1", "team.name": "x", "9lives": "y",
		"empty": "", "__name__": "mine", "team_name": "dup", "ünï": "z",
	})
	want := [][2]string{
		{"_9lives", "y"}, {"__name__", ParcaProfileName}, {"host", "h1"},
		{"service_name", "web.service"}, {"team_name", "x"}, {"_n_", "z"},
	}
	slices.SortFunc(want, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	if !slices.Equal(got, want) {
		t.Errorf("ParcaLabels = %q, want %q", got, want)
	}
}

func TestParcaURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"parca://127.0.0.1:7070", "http://127.0.0.1:7070/api/profiles/writeraw"},
		{"parca+https://parca.example:443/parca/", "https://parca.example:443/parca/api/profiles/writeraw"},
	} {
		b, err := Open(tc.url, Options{})
		if err != nil {
			t.Fatalf("Open(%s): %v", tc.url, err)
		}
		if got := b.(*parca).url; got != tc.want {
			t.Errorf("Open(%s) posts to %s, want %s", tc.url, got, tc.want)
		}
	}
	for _, bad := range []string{"parca://h:1/?x=1", "parca://u:p@h:1"} {
		if _, err := Open(bad, Options{}); err == nil {
			t.Errorf("Open(%s) accepted it", bad)
		}
	}
}

// parcaProfile returns one interval's profile that began at start: n
// samples of fn (leaf) called by main.main, 10 ms period.
func parcaProfile(t *testing.T, start time.Time, fn string, n int64, labels map[string]string) *Profile {
	t.Helper()
	const period = 10_000_000
	m := &profile.Mapping{ID: 1, File: "/usr/bin/work", BuildID: "0123abcd", Start: 0x400000, Limit: 0x500000}
	leaf := &profile.Function{ID: 1, Name: fn, SystemName: fn}
	root := &profile.Function{ID: 2, Name: "main.main", SystemName: "main.main"}
	l1 := &profile.Location{ID: 1, Mapping: m, Address: 0x401000, Line: []profile.Line{{Function: leaf, Line: 12}}}
	l2 := &profile.Location{ID: 2, Mapping: m, Address: 0x402000, Line: []profile.Line{{Function: root, Line: 30}}}
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        period,
		TimeNanos:     start.UnixNano(),
		DurationNanos: int64(10 * time.Second),
		Sample:        []*profile.Sample{{Location: []*profile.Location{l1, l2}, Value: []int64{n, n * period}}},
		Location:      []*profile.Location{l1, l2},
		Function:      []*profile.Function{leaf, root},
		Mapping:       []*profile.Mapping{m},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return &Profile{Data: buf.Bytes(), Profile: p, Labels: labels, Start: start, Duration: 10 * time.Second}
}

// TestParcaServer sends profiles to a real Parca server and reads them
// back through its query API: the functions, the labels and the totals.
func TestParcaServer(t *testing.T) {
	srv := pushtest.StartParca(t)
	b, err := Open("parca://"+srv.Addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := map[string]string{LabelServiceName: "web.service", "host": "h1", "kernel": "6.1.0-28-amd64", "team.name": "x"}
	db := map[string]string{LabelServiceName: "db.service", "host": "h1", "kernel": "6.1.0-28-amd64"}
	now := time.Now().Truncate(time.Second)
	var webSamples int64
	for i, n := range []int64{3, 5, 7} {
		start := now.Add(time.Duration(i-3) * 10 * time.Second)
		if err := b.Send(context.Background(), parcaProfile(t, start, "main.web", n, web)); err != nil {
			t.Fatalf("send web profile %d: %v", i, err)
		}
		webSamples += n
		if err := b.Send(context.Background(), parcaProfile(t, start, "main.db", 100, db)); err != nil {
			t.Fatalf("send db profile %d: %v", i, err)
		}
	}
	from, to := now.Add(-5*time.Minute), now.Add(time.Minute)

	types, err := srv.ProfileTypes()
	if err != nil {
		t.Fatal(err)
	}
	cpu := pushtest.ProfileType{Name: ParcaProfileName, SampleType: "cpu", SampleUnit: "nanoseconds", PeriodType: "cpu", PeriodUnit: "nanoseconds", Delta: true}
	if !slices.Contains(types, cpu) {
		t.Fatalf("Parca's profile types %v lack %v", types, cpu)
	}

	merged, err := srv.Merge(cpu.String()+`{service_name="web.service"}`, from, to)
	if err != nil {
		t.Fatal(err)
	}
	funcs, total := stackFunctions(merged)
	if !slices.Contains(funcs, "main.main;main.web") || slices.ContainsFunc(funcs, func(s string) bool { return strings.Contains(s, "main.db") }) {
		t.Errorf("Parca's merged web.service profile has stacks %q, want main.main;main.web and no main.db", funcs)
	}
	if want := webSamples * 10_000_000; total != want {
		t.Errorf("Parca's merged web.service profile totals %d ns, want %d (%d samples of 10 ms)", total, want, webSamples)
	}

	series, err := srv.Range(cpu.String()+`{}`, from, to, 10*time.Second, "service_name", "host", "kernel", "team_name")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		fmt.Sprint(map[string]string{"service_name": "web.service", "host": "h1", "kernel": "6.1.0-28-amd64", "team_name": "x"}): webSamples * 10_000_000,
		fmt.Sprint(map[string]string{"service_name": "db.service", "host": "h1", "kernel": "6.1.0-28-amd64", "team_name": ""}):   3 * 100 * 10_000_000,
	}
	got := map[string]int64{}
	for _, s := range series {
		for _, k := range []string{"service_name", "host", "kernel", "team_name"} {
			s.Labels[k] += "" // a label a series lacks is empty, as in Prometheus
		}
		got[fmt.Sprint(s.Labels)] = s.Total
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Parca's series (labels: total ns) are\n%v\nwant\n%v", got, want)
	}
}

// stackFunctions returns the profile's stacks as root-first function
// names joined by ";" and the total of its first sample type.
func stackFunctions(p *profile.Profile) (stacks []string, total int64) {
	for _, s := range p.Sample {
		var names []string
		for i := len(s.Location) - 1; i >= 0; i-- {
			for j := len(s.Location[i].Line) - 1; j >= 0; j-- {
				if f := s.Location[i].Line[j].Function; f != nil {
					names = append(names, f.Name)
				}
			}
		}
		stacks = append(stacks, strings.Join(names, ";"))
		total += s.Value[0]
	}
	return stacks, total
}

// TestParcaRefusals: Parca's refusal of a malformed profile is permanent;
// a server that is not there is worth retrying.
func TestParcaRefusals(t *testing.T) {
	srv := pushtest.StartParca(t)
	b, err := Open("parca://"+srv.Addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := &Profile{Data: []byte("not a profile"), Labels: map[string]string{LabelServiceName: "x"}}
	if err := b.Send(context.Background(), bad); !errors.Is(err, ErrPermanent) {
		t.Errorf("Send(malformed) = %v, want a permanent error", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down, err := Open("parca://"+addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = down.Send(context.Background(), parcaProfile(t, time.Now(), "main.x", 1, map[string]string{LabelServiceName: "x"}))
	if err == nil || errors.Is(err, ErrPermanent) {
		t.Errorf("Send to a closed port = %v, want an error worth retrying", err)
	}
}
