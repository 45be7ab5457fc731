// Package pushtest is a fake Grafana Pyroscope server for tests: it
// decodes what arrives exactly as Pyroscope's documented APIs define it
// (POST /ingest with a multipart pprof, and the Connect unary call
// push.v1.PusherService/Push with the protobuf codec) and keeps it.
package pushtest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"google.golang.org/protobuf/encoding/protowire"
)

// Received is one profile as the fake server decoded it.
type Received struct {
	// API is "push" (Connect) or "ingest".
	API string
	// Labels are the series labels: for /ingest, service_name from the
	// application name and the others from its braces.
	Labels map[string]string
	// Profile is the pprof, parsed.
	Profile *profile.Profile
	// From and Until are /ingest's query parameters (Unix seconds); zero
	// for push.
	From, Until time.Time
	// Header is the request's.
	Header http.Header
}

// PushPath is the path of Pyroscope's Connect push method.
const PushPath = "/push.v1.PusherService/Push"

// Pyroscope is an http.Handler that decodes requests as Pyroscope's
// documented APIs define them: POST
// /ingest?name=APP{k=v,...}&from=&until=&format=pprof with the pprof in
// the multipart field "profile", and the Connect unary call POST
// /push.v1.PusherService/Push with a protobuf push.v1.PushRequest. It
// fails the first FailN requests with FailCode, and any request it
// cannot decode, or whose Authorization differs from Auth when Auth is
// set, with 400 or 401. Its methods are safe for concurrent use; set
// the fields before serving.
type Pyroscope struct {
	FailN    int
	FailCode int
	Auth     string // the Authorization every request must carry, or ""

	mu       sync.Mutex
	got      []Received
	errs     []error
	requests int
}

// ServeHTTP decodes one request.
func (f *Pyroscope) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if f.requests <= f.FailN {
		http.Error(w, "failing on purpose", f.FailCode)
		return
	}
	if f.Auth != "" && r.Header.Get("Authorization") != f.Auth {
		f.errs = append(f.errs, fmt.Errorf("authorization %q", r.Header.Get("Authorization")))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var got []Received
	var err error
	switch {
	case r.Method != http.MethodPost:
		err = fmt.Errorf("method %s", r.Method)
	case r.URL.Path == "/ingest":
		got, err = decodeIngest(r)
	case r.URL.Path == PushPath:
		got, err = decodePush(r)
	default:
		err = fmt.Errorf("path %s", r.URL.Path)
	}
	if err != nil {
		f.errs = append(f.errs, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for i := range got {
		got[i].Header = r.Header.Clone()
	}
	f.got = append(f.got, got...)
	if r.URL.Path == PushPath {
		w.Header().Set("Content-Type", "application/proto")
	}
}

// Received returns what arrived so far, and the errors of the requests
// it refused (not those failed on purpose).
func (f *Pyroscope) Received() ([]Received, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Received(nil), f.got...), errors.Join(f.errs...)
}

// Requests returns how many requests arrived, failed ones included.
func (f *Pyroscope) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// ingestName is /ingest's application name: app{k=v,k=v}.
var ingestName = regexp.MustCompile(`^([^{}]+)(?:\{([^{}]*)\})?$`)

func decodeIngest(r *http.Request) ([]Received, error) {
	q := r.URL.Query()
	if f := q.Get("format"); f != "pprof" {
		return nil, fmt.Errorf("format %q", f)
	}
	m := ingestName.FindStringSubmatch(q.Get("name"))
	if m == nil {
		return nil, fmt.Errorf("name %q", q.Get("name"))
	}
	labels := map[string]string{"service_name": m[1]}
	if m[2] != "" {
		for _, kv := range strings.Split(m[2], ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("name %q: label %q", q.Get("name"), kv)
			}
			labels[k] = v
		}
	}
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	until, err2 := strconv.ParseInt(q.Get("until"), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	file, _, err := r.FormFile("profile")
	if err != nil {
		return nil, fmt.Errorf("multipart field profile: %w", err)
	}
	defer file.Close()
	p, err := profile.Parse(file)
	if err != nil {
		return nil, err
	}
	return []Received{{API: "ingest", Labels: labels, Profile: p, From: time.Unix(from, 0), Until: time.Unix(until, 0)}}, nil
}

func decodePush(r *http.Request) ([]Received, error) {
	if ct := r.Header.Get("Content-Type"); ct != "application/proto" {
		return nil, fmt.Errorf("content type %q", ct)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var out []Received
	err = eachField(body, func(num protowire.Number, series []byte) error {
		if num != 1 {
			return fmt.Errorf("PushRequest field %d", num)
		}
		rec := Received{API: "push", Labels: map[string]string{}}
		err := eachField(series, func(num protowire.Number, b []byte) error {
			switch num {
			case 1:
				var name, value string
				err := eachField(b, func(num protowire.Number, b []byte) error {
					switch num {
					case 1:
						name = string(b)
					case 2:
						value = string(b)
					}
					return nil
				})
				rec.Labels[name] = value
				return err
			case 2:
				return eachField(b, func(num protowire.Number, b []byte) error {
					if num == 1 {
						p, err := profile.ParseData(b)
						rec.Profile = p
						return err
					}
					return nil
				})
			}
			return fmt.Errorf("RawProfileSeries field %d", num)
		})
		out = append(out, rec)
		return err
	})
	return out, err
}

// eachField calls fn with each length-delimited field of the message b.
func eachField(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return fmt.Errorf("bad tag (type %d)", typ)
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}
