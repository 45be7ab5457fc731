package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// contOptions are the flags of continuous profiling: pushing interval
// profiles to a backend (--push) or writing them to rotating files
// (--switch-output).
type contOptions struct {
	push          string        // --push URL
	interval      time.Duration // --interval
	service       string        // --service: service_name of every profile
	labels        []string      // --label k=v, in order
	headers       []string      // --push-header "Name: value"
	tenant        string        // --push-tenant: X-Scope-OrgID
	bearerFile    string        // --push-bearer-token-file
	basicAuthFile string        // --push-basic-auth-file: user:password
	caFile        string        // --push-ca: PEM roots for +https
	queueBytes    int           // --push-queue
	metrics       string        // --metrics ADDR
	switchOutput  time.Duration // --switch-output
	switchMax     int           // --switch-max-files
}

// defaultInterval is --interval's default: Pyroscope's and Parca's
// agents send every 10 s too.
const defaultInterval = 10 * time.Second

// register adds the continuous profiling flags to fs.
func (c *contOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&c.push, "push", "", "profile until stopped and push a profile every --interval to `url`: pyroscope://HOST:PORT (Connect API; /ingest at the end of the path for the older API), parca://HOST:PORT, otlp://HOST:4318 (OTLP/HTTP profiles, alpha); SCHEME+https:// for TLS")
	c.interval = defaultInterval
	fs.Var((*durationFlag)(&c.interval), "interval", "with --push or --switch-output: one profile every `duration`")
	fs.StringVar(&c.service, "service", "", "with --push: the service_name `name` of every profile; default one profile per service (the task's systemd unit or container id, else its process name)")
	fs.Var(listFlag{&c.labels}, "label", "with --push: add the label `k=v` to every profile (repeatable)")
	fs.Var(listFlag{&c.headers}, "push-header", "with --push: add the HTTP header `Name:value` to every request (repeatable)")
	fs.StringVar(&c.tenant, "push-tenant", "", "with --push: send the `tenant` as X-Scope-OrgID (Pyroscope, Mimir-style multi-tenancy)")
	fs.StringVar(&c.bearerFile, "push-bearer-token-file", "", "with --push: send the bearer token in `file` (or $GPROFILE_PUSH_BEARER_TOKEN) as Authorization")
	fs.StringVar(&c.basicAuthFile, "push-basic-auth-file", "", "with --push: basic auth from `file` holding user:password (or $GPROFILE_PUSH_BASIC_AUTH)")
	fs.StringVar(&c.caFile, "push-ca", "", "with --push SCHEME+https: trust the CA certificates in PEM `file` besides the system's")
	fs.Var(byteSizeFlag{&c.queueBytes}, "push-queue", "with --push: keep at most `bytes` of profiles waiting for the backend (64M, 512K); the oldest are dropped and counted past it (default 16M)")
	fs.StringVar(&c.metrics, "metrics", "", "with --push or --switch-output: serve Prometheus metrics (samples, lost, queue, push errors, drops, RSS, fds, goroutines) on `addr`/metrics (:9464, 127.0.0.1:9464)")
	fs.Var((*durationFlag)(&c.switchOutput), "switch-output", "profile until stopped and write a new -o file every `duration` (perf's word), its name stamped with the interval's start time")
	fs.IntVar(&c.switchMax, "switch-max-files", 0, "with --switch-output: keep only the newest `n` files (0: all)")
}

// on reports whether the run is continuous.
func (c *contOptions) on() bool { return c.push != "" || c.switchOutput > 0 }

// checkContinuous rejects continuous flags that make no sense with the
// rest; set holds the flags given.
func (o *options) checkContinuous(set map[string]bool) error {
	c := &o.cont
	if !c.on() {
		for _, f := range []string{"interval", "service", "label", "push-header", "push-tenant", "push-bearer-token-file", "push-basic-auth-file", "push-ca", "push-queue", "metrics", "switch-max-files"} {
			if set[f] {
				return fmt.Errorf("--%s is for continuous profiling: add --push URL or --switch-output DURATION", f)
			}
		}
		return nil
	}
	if set["interval"] && set["switch-output"] && c.interval != c.switchOutput {
		return errors.New("--interval and --switch-output give two intervals: give one (--switch-output alone sets both)")
	}
	if c.switchOutput > 0 {
		c.interval = c.switchOutput
	}
	if c.interval < 100*time.Millisecond {
		return fmt.Errorf("--interval %v: want at least 100ms (10s is usual)", c.interval)
	}
	if c.switchMax < 0 {
		return fmt.Errorf("--switch-max-files %d: want 0 (keep all) or more", c.switchMax)
	}
	if c.push != "" && c.switchOutput == 0 && set["o"] {
		return errors.New("-o with --push: profiles go to the backend; add --switch-output DURATION to write files too")
	}
	for _, kv := range c.labels {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !validLabelName(k) {
			return fmt.Errorf("--label %q: want name=value, the name of letters, digits and _ (not first a digit)", kv)
		}
		if k == "service_name" {
			return fmt.Errorf("--label %q: use --service NAME for service_name", kv)
		}
	}
	for _, h := range c.headers {
		if k, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("--push-header %q: want Name:value", h)
		}
	}
	return nil
}

// validLabelName reports whether s is a Prometheus-style label name, as
// every backend accepts: [a-zA-Z_][a-zA-Z0-9_]*.
func validLabelName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// listFlag is a repeatable string flag.
type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, " ")
}

func (l listFlag) Set(s string) error { *l.v = append(*l.v, s); return nil }

// byteSizeFlag takes a size in bytes with an optional K, M or G suffix
// (powers of 1024).
type byteSizeFlag struct{ v *int }

func (b byteSizeFlag) String() string {
	if b.v == nil {
		return "0"
	}
	return strconv.Itoa(*b.v)
}

func (b byteSizeFlag) Set(s string) error {
	mult := 1
	num := strings.TrimSuffix(strings.ToUpper(s), "B")
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K':
			mult, num = 1<<10, num[:n-1]
		case 'M':
			mult, num = 1<<20, num[:n-1]
		case 'G':
			mult, num = 1<<30, num[:n-1]
		}
	}
	v, err := strconv.Atoi(num)
	if err != nil || v <= 0 || v > (1<<40)/mult {
		return fmt.Errorf("not a size in bytes (64M, 512K, 1048576)")
	}
	*b.v = v * mult
	return nil
}

// checkContinuousOutput checks the output of a continuous run once the
// format is known: --switch-output writes pprof, folded or flame graph
// files (not a stream, not stdout); --push alone writes none.
func (o *options) checkContinuousOutput(set map[string]bool) error {
	c := &o.cont
	switch {
	case !c.on():
		return nil
	case c.switchOutput == 0 && (set["E"] || set["format"]):
		return errors.New("--push sends pprof: -E and --format are for the files of --switch-output")
	case c.switchOutput == 0:
		return nil
	case o.format == formatText || o.format == formatJSON:
		return fmt.Errorf("--switch-output writes a file per interval: --format %s streams samples; use pprof, folded or html", o.format)
	case o.output == "-" || !regularTarget(o.output):
		return fmt.Errorf("--switch-output writes a new file every interval: -o %s is not a file name; give -o NAME.pb.gz", o.output)
	}
	return nil
}
