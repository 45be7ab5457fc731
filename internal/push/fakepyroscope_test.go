package push

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

// received is one profile as a fake Pyroscope server decoded it.
type received struct {
	api      string // "push" or "ingest"
	labels   map[string]string
	profile  *profile.Profile
	from, to time.Time // /ingest only: Unix seconds
	header   http.Header
}

// fakePyroscope decodes requests as Pyroscope's documented APIs define
// them: POST /ingest?name=APP{k=v,...}&from=&until=&format=pprof with the
// pprof in the multipart field "profile", and the Connect unary call
// POST /push.v1.PusherService/Push with a protobuf push.v1.PushRequest.
// It fails the first failN requests with failCode, and any request it
// cannot decode with 400.
type fakePyroscope struct {
	mu       sync.Mutex
	got      []received
	errs     []error
	requests int
	failN    int
	failCode int
}

func (f *fakePyroscope) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if f.requests <= f.failN {
		http.Error(w, "failing on purpose", f.failCode)
		return
	}
	var got []received
	var err error
	switch {
	case r.Method != http.MethodPost:
		err = fmt.Errorf("method %s", r.Method)
	case r.URL.Path == "/ingest":
		got, err = decodeIngest(r)
	case r.URL.Path == PyroscopePushPath:
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
		got[i].header = r.Header.Clone()
	}
	f.got = append(f.got, got...)
	if r.URL.Path == PyroscopePushPath {
		w.Header().Set("Content-Type", "application/proto")
	}
}

// received returns what arrived so far, and the decode errors.
func (f *fakePyroscope) received() ([]received, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.got...), errors.Join(f.errs...)
}

// ingestName is /ingest's application name: app{k=v,k=v}.
var ingestName = regexp.MustCompile(`^([^{}]+)(?:\{([^{}]*)\})?$`)

func decodeIngest(r *http.Request) ([]received, error) {
	q := r.URL.Query()
	if f := q.Get("format"); f != "pprof" {
		return nil, fmt.Errorf("format %q", f)
	}
	m := ingestName.FindStringSubmatch(q.Get("name"))
	if m == nil {
		return nil, fmt.Errorf("name %q", q.Get("name"))
	}
	labels := map[string]string{LabelServiceName: m[1]}
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
	return []received{{api: "ingest", labels: labels, profile: p, from: time.Unix(from, 0), to: time.Unix(until, 0)}}, nil
}

func decodePush(r *http.Request) ([]received, error) {
	if ct := r.Header.Get("Content-Type"); ct != "application/proto" {
		return nil, fmt.Errorf("content type %q", ct)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var out []received
	err = eachField(body, func(num protowire.Number, series []byte) error {
		if num != 1 {
			return fmt.Errorf("PushRequest field %d", num)
		}
		rec := received{api: "push", labels: map[string]string{}}
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
				rec.labels[name] = value
				return err
			case 2:
				return eachField(b, func(num protowire.Number, b []byte) error {
					if num == 1 {
						p, err := profile.ParseData(b)
						rec.profile = p
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
