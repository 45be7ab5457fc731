package push

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/push/pushtest"
)

// testProfile returns a small profile of one sample of fn, 10 ms of
// cpu, and the labels.
func testProfile(t *testing.T, fn string, labels map[string]string) *Profile {
	t.Helper()
	start := time.Unix(1_700_000_000, 0)
	f := &profile.Function{ID: 1, Name: fn}
	m := &profile.Mapping{ID: 1, File: "/bin/x", BuildID: "abcd", Start: 0x1000, Limit: 0x2000}
	loc := &profile.Location{ID: 1, Mapping: m, Address: 0x1100, Line: []profile.Line{{Function: f}}}
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        10_101_010,
		TimeNanos:     start.UnixNano(),
		DurationNanos: int64(10 * time.Second),
		Sample:        []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{1, 10_000_000}}},
		Location:      []*profile.Location{loc},
		Function:      []*profile.Function{f},
		Mapping:       []*profile.Mapping{m},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return &Profile{Data: buf.Bytes(), Profile: p, Labels: labels, Start: start, Duration: 10 * time.Second}
}

func TestPyroscopeAPIs(t *testing.T) {
	labels := map[string]string{LabelServiceName: "web.service", "host": "h1", "kernel": "6.1.0-28-amd64", "env": "a,b={c}"}
	for _, tc := range []struct{ path, api string }{{"", "push"}, {"/", "push"}, {"/ingest", "ingest"}} {
		t.Run(tc.api+tc.path, func(t *testing.T) {
			fake := &pushtest.Pyroscope{}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			b, err := Open("pyroscope://"+strings.TrimPrefix(srv.URL, "http://")+tc.path, Options{Header: http.Header{"X-Scope-Orgid": {"tenant1"}}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.Name(), tc.api) {
				t.Errorf("Name() = %q, want it to say %s", b.Name(), tc.api)
			}
			if err := b.Send(context.Background(), testProfile(t, "main.work", labels)); err != nil {
				t.Fatal(err)
			}
			got, err := fake.Received()
			if err != nil || len(got) != 1 {
				t.Fatalf("received %d profiles, errors %v; want 1", len(got), err)
			}
			r := got[0]
			if r.API != tc.api {
				t.Errorf("arrived through %s, want %s", r.API, tc.api)
			}
			want := map[string]string{LabelServiceName: "web.service", "host": "h1", "kernel": "6.1.0-28-amd64", "env": "a_b__c_"}
			if tc.api == "push" {
				want["env"] = labels["env"] // the push API takes any value
				want["__name__"] = PyroscopeProfileName
			}
			if !mapsEqual(r.Labels, want) {
				t.Errorf("labels %v, want %v", r.Labels, want)
			}
			if tc.api == "ingest" && (r.From.Unix() != 1_700_000_000 || r.Until.Unix() != 1_700_000_010) {
				t.Errorf("from %d until %d, want 1700000000 and 1700000010", r.From.Unix(), r.Until.Unix())
			}
			if fn := r.Profile.Function[0].Name; fn != "main.work" || r.Profile.Mapping[0].BuildID != "abcd" {
				t.Errorf("profile has %q, build ID %q; want main.work, abcd", fn, r.Profile.Mapping[0].BuildID)
			}
			if h := r.Header.Get("X-Scope-OrgID"); h != "tenant1" {
				t.Errorf("X-Scope-OrgID %q, want tenant1", h)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestPyroscopeRefusals(t *testing.T) {
	for _, tc := range []struct {
		code      int
		permanent bool
	}{{400, true}, {401, true}, {429, false}, {408, false}, {500, false}, {503, false}} {
		fake := &pushtest.Pyroscope{FailN: 1, FailCode: tc.code}
		srv := httptest.NewServer(fake)
		b, err := Open("pyroscope://"+strings.TrimPrefix(srv.URL, "http://"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = b.Send(context.Background(), testProfile(t, "f", map[string]string{LabelServiceName: "s"}))
		if err == nil || errors.Is(err, ErrPermanent) != tc.permanent || !strings.Contains(err.Error(), "failing on purpose") {
			t.Errorf("status %d: error %v, want one that is permanent=%v and quotes the body", tc.code, err, tc.permanent)
		}
		srv.Close()
	}
}

func TestOpenBadURLs(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"pyroscope:4040", "no host"},
		{"http://localhost:4040", `unknown scheme "http"`},
		{"pyroscope+tls://h:1", "unknown scheme"},
		{"pyroscope://h:1/?x=1", "query"},
		{"::", "want SCHEME://HOST:PORT"},
	} {
		if _, err := Open(tc.url, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error with %q", tc.url, err, tc.want)
		}
	}
	b, err := Open("pyroscope+https://h:4040/prefix", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "pyroscope push https://h:4040/prefix"+PyroscopePushPath {
		t.Errorf("Open(pyroscope+https): Name() = %q", b.Name())
	}
}
