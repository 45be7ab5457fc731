package pushtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/testutil"
)

// Parca is a Parca server started for one test, storing in memory (and a
// filesystem bucket in the test's temporary directory).
type Parca struct {
	// Addr is where it serves HTTP and gRPC: 127.0.0.1:PORT.
	Addr string
}

// StartParca starts the Parca server that scripts/build-test-servers.sh
// built (it skips t without it; see testutil.TestServer) and stops it
// when t ends. Parca does not reach out for debug info: its debuginfod
// upstream list is empty.
func StartParca(t testing.TB) *Parca {
	t.Helper()
	bin := testutil.TestServer(t, "parca")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "parca.yaml")
	conf := fmt.Sprintf("object_storage:\n  bucket:\n    type: FILESYSTEM\n    config:\n      directory: %q\n", filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	cmd := exec.Command(bin, "--config-path="+cfg, "--http-address="+addr,
		"--debuginfod-upstream-servers=", "--debuginfo-cache-dir="+dir, "--storage-path="+filepath.Join(dir, "storage"))
	cmd.Dir = dir
	testutil.StartServer(t, cmd, addr)
	return &Parca{Addr: addr}
}

// get sends GET path?q to the server's API and decodes its JSON answer
// into v.
func (p *Parca) get(path string, q url.Values, v any) error {
	u := "http://" + p.Addr + "/api" + path + "?" + q.Encode()
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: decode %.200s: %w", u, body, err)
	}
	return nil
}

// ProfileType is one entry of Parca's /profiles/types answer.
type ProfileType struct {
	Name       string `json:"name"`
	SampleType string `json:"sampleType"`
	SampleUnit string `json:"sampleUnit"`
	PeriodType string `json:"periodType"`
	PeriodUnit string `json:"periodUnit"`
	Delta      bool   `json:"delta"`
}

// String is the type as Parca's queries name it:
// NAME:SAMPLE_TYPE:SAMPLE_UNIT:PERIOD_TYPE:PERIOD_UNIT[:delta].
func (pt ProfileType) String() string {
	s := pt.Name + ":" + pt.SampleType + ":" + pt.SampleUnit + ":" + pt.PeriodType + ":" + pt.PeriodUnit
	if pt.Delta {
		s += ":delta"
	}
	return s
}

// ProfileTypes returns the profile types Parca holds data of
// (QueryService.ProfileTypes).
func (p *Parca) ProfileTypes() ([]ProfileType, error) {
	var r struct {
		Types []ProfileType `json:"types"`
	}
	err := p.get("/profiles/types", nil, &r)
	return r.Types, err
}

// Merge returns the profile Parca merges from the series that query
// selects (PROFILE_TYPE{label="value",...}) between start and end, as
// pprof (QueryService.Query, MODE_MERGE, REPORT_TYPE_PPROF).
func (p *Parca) Merge(query string, start, end time.Time) (*profile.Profile, error) {
	q := url.Values{
		"mode":        {"MODE_MERGE"},
		"reportType":  {"REPORT_TYPE_PPROF"},
		"merge.query": {query},
		"merge.start": {start.UTC().Format(time.RFC3339Nano)},
		"merge.end":   {end.UTC().Format(time.RFC3339Nano)},
	}
	var r struct {
		Pprof []byte `json:"pprof"`
	}
	if err := p.get("/profiles/query", q, &r); err != nil {
		return nil, err
	}
	prof, err := profile.ParseData(r.Pprof)
	if err != nil {
		return nil, fmt.Errorf("parse the pprof of query %s: %w", query, err)
	}
	return prof, nil
}

// Series is one series of a range query: its labels (those summed by)
// and the total of its samples' values.
type Series struct {
	Labels map[string]string
	Total  int64
	// Samples is how many points the series has (one per step that has
	// data).
	Samples int
}

// Range returns the series of query between start and end, one per
// distinct value of the labels sumBy (QueryService.QueryRange, one
// point per step).
func (p *Parca) Range(query string, start, end time.Time, step time.Duration, sumBy ...string) ([]Series, error) {
	q := url.Values{
		"query": {query},
		"start": {start.UTC().Format(time.RFC3339Nano)},
		"end":   {end.UTC().Format(time.RFC3339Nano)},
		"step":  {fmt.Sprintf("%gs", step.Seconds())},
		"sumBy": sumBy,
	}
	var r struct {
		Series []struct {
			Labelset struct {
				Labels []struct{ Name, Value string } `json:"labels"`
			} `json:"labelset"`
			Samples []struct {
				Value string `json:"value"`
			} `json:"samples"`
		} `json:"series"`
	}
	if err := p.get("/profiles/query_range", q, &r); err != nil {
		return nil, err
	}
	var out []Series
	for _, s := range r.Series {
		ser := Series{Labels: map[string]string{}, Samples: len(s.Samples)}
		for _, l := range s.Labelset.Labels {
			ser.Labels[l.Name] = l.Value
		}
		for _, smp := range s.Samples {
			v, err := strconv.ParseInt(smp.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("range query %s: sample value %q: %w", query, smp.Value, err)
			}
			ser.Total += v
		}
		out = append(out, ser)
	}
	return out, nil
}

// LabelValues returns the values Parca holds of the label name between
// start and end (QueryService.Values).
func (p *Parca) LabelValues(name string, start, end time.Time) ([]string, error) {
	q := url.Values{
		"start": {start.UTC().Format(time.RFC3339Nano)},
		"end":   {end.UTC().Format(time.RFC3339Nano)},
	}
	var r struct {
		LabelValues []string `json:"labelValues"`
	}
	err := p.get("/profiles/labels/"+url.PathEscape(name)+"/values", q, &r)
	return r.LabelValues, err
}
