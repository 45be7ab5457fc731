package push

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Profile is one interval's profile for one service.
type Profile struct {
	// Data is the gzipped pprof (profile.Profile.Write) with TimeNanos,
	// DurationNanos and Period set and the mappings' build IDs kept.
	Data []byte
	// Profile is the same profile, parsed, for encoders that convert it
	// (OTLP). Backends must not change it.
	Profile *profile.Profile
	// Labels are the series labels: service_name, host, kernel and the
	// user's --label k=v pairs.
	Labels map[string]string
	// Start is when the interval began; Duration is how long it lasted
	// (wall clock).
	Start    time.Time
	Duration time.Duration
}

// Backend sends one profile to a profiling backend. A returned error is
// retried with backoff by the caller unless errors.Is(err, ErrPermanent).
type Backend interface {
	// Name says which backend and URL the profiles go to, for the log.
	Name() string
	// Send delivers p, returning once the backend has accepted it, or
	// with ctx's error when ctx is done first.
	Send(ctx context.Context, p *Profile) error
}

// Options is what every backend's HTTP needs.
type Options struct {
	// Client sends the requests (TLS settings, timeouts);
	// http.DefaultClient when nil.
	Client *http.Client
	// Header is added to every request: Authorization (bearer or basic),
	// X-Scope-OrgID, the user's extra headers.
	Header http.Header
}

// ErrPermanent marks an error that retrying will not fix (the backend
// refused the request as malformed or unauthorized): the caller drops
// the profile and counts it instead of retrying.
var ErrPermanent = errors.New("permanent push error")

// Open picks the backend by the URL's scheme: pyroscope, parca or otlp,
// with "+https" appended for TLS (pyroscope+https://host:4040). A
// pyroscope URL whose path ends in /ingest uses Pyroscope's /ingest API;
// any other path is the prefix of its Connect push API
// (push.v1.PusherService/Push). Its error names the scheme or host that
// is wrong and what to write instead.
func Open(rawURL string, o Options) (Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("push URL %q: %w (want SCHEME://HOST:PORT, SCHEME one of pyroscope, parca, otlp, with +https for TLS)", rawURL, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("push URL %q has no host (want SCHEME://HOST:PORT, SCHEME one of pyroscope, parca, otlp, with +https for TLS)", rawURL)
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	kind, tls := strings.CutSuffix(u.Scheme, "+https")
	if !tls {
		kind, _ = strings.CutSuffix(kind, "+http")
	}
	base := *u
	base.Scheme = "http"
	if tls {
		base.Scheme = "https"
	}
	switch kind {
	case "pyroscope":
		return newPyroscope(&base, o)
	case "parca":
		return newParca(&base, o)
	case "otlp":
		return newOTLP(&base, o)
	}
	return nil, fmt.Errorf("push URL %q: unknown scheme %q (want pyroscope, parca or otlp, with +https for TLS: pyroscope+https://HOST:PORT)", rawURL, u.Scheme)
}
