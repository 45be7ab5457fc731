package main

import (
	"bytes"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/push"
	"github.com/gprofile/gprofile/internal/push/pushtest"
	"github.com/gprofile/gprofile/internal/testutil"
)

// pushSummary is the last line of a continuous run.
var pushSummary = regexp.MustCompile(`gprofile: (\d+) samples \((\d+) lost\) in [0-9.]+ s, (\d+) intervals, (\d+) profiles pushed, (\d+) dropped, (\d+) push errors`)

// TestPushPyroscope pushes chain's profile every second for 3.5 s to a
// fake Pyroscope, through each API: every interval arrives once (the
// first request fails and is retried), with the labels, tenant and
// credentials given, the period and times set, chain's functions and its
// build ID; and the samples of all the profiles add up to what gprofile
// counted.
func TestPushPyroscope(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	chain, _ := startChain(t, 30)
	for _, api := range []string{"push", "ingest"} {
		t.Run(api, func(t *testing.T) {
			fake := &pushtest.Pyroscope{FailN: 1, FailCode: 503}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			url := "pyroscope://" + strings.TrimPrefix(srv.URL, "http://")
			args := []string{"-p", strconv.Itoa(chain.Process.Pid), "-f", "99", "-d", "3.5", "--interval", "1s",
				"--service", "chainsvc", "--label", "env=ci", "--push-tenant", "t1"}
			env := os.Environ()
			if api == "push" {
				tok := filepath.Join(t.TempDir(), "token")
				if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				fake.Auth = "Bearer s3cret"
				args = append(args, "--push", url, "--push-bearer-token-file", tok)
			} else {
				fake.Auth = "Basic " + base64.StdEncoding.EncodeToString([]byte("u:p w"))
				env = append(env, "GPROFILE_PUSH_BASIC_AUTH=u:p w")
				args = append(args, "--push", url+"/ingest")
			}
			cmd := exec.Command(gp, args...)
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("gprofile: %v\n%s", err, stderr.Bytes())
			}
			m := pushSummary.FindStringSubmatch(stderr.String())
			if m == nil {
				t.Fatalf("no summary line:\n%s", stderr.Bytes())
			}
			samples, _ := strconv.ParseInt(m[1], 10, 64)
			pushed, _ := strconv.Atoi(m[4])
			got, err := fake.Received()
			if err != nil {
				t.Fatalf("the server refused requests: %v\n%s", err, stderr.Bytes())
			}
			if len(got) < 3 || len(got) != pushed || m[5] != "0" || m[6] != "1" {
				t.Fatalf("received %d profiles; gprofile said %s; want at least 3 (3.5 s at 1 s), all pushed, none dropped, 1 error (the 503)", len(got), m[0])
			}
			var sum int64
			names := map[string]bool{}
			for i, r := range got {
				want := map[string]string{"service_name": "chainsvc", "env": "ci"}
				if api == "push" {
					want["__name__"] = "process_cpu"
				}
				for k, v := range want {
					if r.Labels[k] != v {
						t.Errorf("profile %d: label %s=%q, want %q (labels %v)", i, k, r.Labels[k], v, r.Labels)
					}
				}
				if r.Labels["host"] == "" || r.Labels["kernel"] == "" || r.Header.Get("X-Scope-OrgID") != "t1" {
					t.Errorf("profile %d: labels %v, tenant %q; want host, kernel, t1", i, r.Labels, r.Header.Get("X-Scope-OrgID"))
				}
				p := r.Profile
				if p.TimeNanos == 0 || p.DurationNanos <= 0 || p.Period != int64(1e9)/99 {
					t.Errorf("profile %d: time %d, duration %d ns, period %d; want set, 1e9/99", i, p.TimeNanos, p.DurationNanos, p.Period)
				}
				if i > 0 && p.TimeNanos < got[i-1].Profile.TimeNanos+got[i-1].Profile.DurationNanos {
					t.Errorf("profile %d starts before profile %d ended", i, i-1)
				}
				for _, s := range p.Sample {
					sum += s.Value[0]
				}
				for _, f := range p.Function {
					names[f.Name] = true
				}
				built := false
				for _, mp := range p.Mapping {
					built = built || strings.HasSuffix(mp.File, "/chain") && mp.BuildID != ""
				}
				if !built {
					t.Errorf("profile %d: no mapping of chain with a build ID: %v", i, p.Mapping)
				}
			}
			if sum != samples {
				t.Errorf("the profiles hold %d samples, gprofile counted %d", sum, samples)
			}
			if !names["chain_c"] {
				t.Errorf("chain_c is in no profile")
			}
		})
	}
}

// TestSwitchOutput profiles chain for 4.5 s with --switch-output 1s and
// --switch-max-files 3, and reads --metrics while it runs: the directory
// ends with the 3 newest files (older ones were removed), each a whole
// pprof with samples, named by its start in time order; the metrics page
// counts the samples once an interval is done.
func TestSwitchOutput(t *testing.T) {
	testutil.RequirePrivileges(t)
	gp := buildGprofile(t)
	chain, _ := startChain(t, 30)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(gp, "-p", strconv.Itoa(chain.Process.Pid), "-f", "99", "-d", "4.5",
		"--switch-output", "1s", "--switch-max-files", "3", "-o", filepath.Join(dir, "p.pb.gz"), "--metrics", addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var page []byte
	deadline := time.Now().Add(30 * time.Second)
	for page == nil && time.Now().Before(deadline) {
		if r, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if bytes.Contains(b, []byte("gprofile_intervals_total 1")) {
				page = b
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gprofile: %v\n%s", err, stderr.Bytes())
	}
	if page == nil {
		t.Fatalf("no metrics page at %s with one interval done\n%s", addr, stderr.Bytes())
	}
	if !regexp.MustCompile(`(?m)^gprofile_samples_total [1-9]`).Match(page) {
		t.Errorf("metrics page counts no samples:\n%s", page)
	}
	if !regexp.MustCompile(`(?m)^gprofile_cpus_sampled [1-9]`).Match(page) {
		t.Errorf("metrics page counts no CPUs sampled:\n%s", page)
	}
	if b := regexp.MustCompile(`(?m)^gprofile_interval_build_seconds_total (\S+)$`).FindSubmatch(page); b == nil || string(b[1]) == "0" {
		t.Errorf("metrics page has no time spent building the interval's profile:\n%s", page)
	}
	m := regexp.MustCompile(`gprofile: (\d+) samples \(0 lost\) in [0-9.]+ s, (\d+) intervals`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no summary line:\n%s", stderr.Bytes())
	}
	intervals, _ := strconv.Atoi(m[2])
	files, err := filepath.Glob(filepath.Join(dir, "p.*.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if intervals < 4 || len(files) != 3 {
		t.Fatalf("%d intervals, files %v; want at least 4 intervals and the newest 3 files kept\n%s", intervals, files, stderr.Bytes())
	}
	var last int64
	for _, f := range files { // Glob sorts: names sort by start time
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.ParseData(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if p.TimeNanos <= last {
			t.Errorf("%s starts at %d, not after the file before it (%d)", f, p.TimeNanos, last)
		}
		last = p.TimeNanos
		if len(p.Sample) == 0 {
			t.Errorf("%s holds no samples", f)
		}
	}
}

// TestPushParca pushes chain's profile every second for 3.5 s to a real
// Parca server (scripts/build-test-servers.sh builds it) and queries it
// back: the merged profile of the service holds chain_c under main, with
// as much CPU time as gprofile counted samples (each one period), and the
// labels given are on the series.
func TestPushParca(t *testing.T) {
	testutil.RequirePrivileges(t)
	srv := pushtest.StartParca(t)
	start := time.Now()
	samples, _, stderr := pushChain(t, "parca://"+srv.Addr)
	cpu := pushtest.ProfileType{Name: push.ParcaProfileName, SampleType: "cpu", SampleUnit: "nanoseconds", PeriodType: "cpu", PeriodUnit: "nanoseconds", Delta: true}
	from, to := start.Add(-time.Minute), time.Now().Add(time.Minute)
	merged, err := srv.Merge(cpu.String()+`{service_name="chainsvc",env="ci"}`, from, to)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	chained := false
	for _, s := range merged.Sample {
		total += s.Value[0]
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		chained = chained || hasChain(reversed(names), []string{"main", "chain_a", "chain_b", "chain_c"})
	}
	if want := samples * (int64(1e9) / 99); total != want || !chained {
		t.Errorf("Parca holds %d ns for chainsvc (main;…;chain_c in it: %v); gprofile counted %d samples = %d ns\n%s", total, chained, samples, want, stderr)
	}
}

// pushChain profiles the chain workload for 3.5 s at 99 Hz, pushing every
// second to url as service chainsvc with the label env=ci, and returns
// the samples and profiles gprofile counted and its stderr; it fails t
// unless every profile was pushed, none dropped and no push failed.
func pushChain(t *testing.T, url string) (samples int64, pushed int, stderr string) {
	t.Helper()
	gp := buildGprofile(t)
	chain, _ := startChain(t, 30)
	cmd := exec.Command(gp, "-p", strconv.Itoa(chain.Process.Pid), "-f", "99", "-d", "3.5", "--interval", "1s",
		"--push", url, "--service", "chainsvc", "--label", "env=ci")
	var buf bytes.Buffer
	cmd.Stderr = &buf
	if err := cmd.Run(); err != nil {
		t.Fatalf("gprofile: %v\n%s", err, buf.Bytes())
	}
	m := pushSummary.FindStringSubmatch(buf.String())
	if m == nil || m[5] != "0" || m[6] != "0" {
		t.Fatalf("summary %q: want every profile pushed, none dropped, no errors\n%s", m, buf.Bytes())
	}
	samples, _ = strconv.ParseInt(m[1], 10, 64)
	pushed, _ = strconv.Atoi(m[4])
	return samples, pushed, buf.String()
}
