package push

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Pyroscope's label and API names.
const (
	// LabelServiceName is the label that names a profile's service, in
	// every backend (Pyroscope, Parca and OpenTelemetry use this name).
	LabelServiceName = "service_name"
	// PyroscopeProfileName is the __name__ label of the profiles sent to
	// Pyroscope's push API: its name for a CPU profile of a process.
	PyroscopeProfileName = "process_cpu"
	// PyroscopePushPath is the path of Pyroscope's Connect push API.
	PyroscopePushPath = "/push.v1.PusherService/Push"
)

// pyroscope sends to Grafana Pyroscope: to its Connect API
// (push.v1.PusherService/Push, protobuf codec) or, when the URL's path
// ends in /ingest, to its /ingest API (multipart pprof).
type pyroscope struct {
	url    string // of the request: the push method's or /ingest
	ingest bool
	o      Options
}

// newPyroscope returns the Pyroscope backend for u (scheme http or
// https): its path ending in /ingest chooses the /ingest API, any other
// path is the prefix of the Connect API (behind a reverse proxy).
func newPyroscope(u *url.URL, o Options) (Backend, error) {
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("pyroscope URL %s: a query or fragment is not used (write pyroscope://HOST:PORT or pyroscope://HOST:PORT/ingest)", u.Redacted())
	}
	p := &pyroscope{o: o}
	base := *u
	base.User = nil // credentials go in headers (--push-basic-auth), not URLs
	if strings.HasSuffix(u.Path, "/ingest") {
		p.ingest = true
	} else {
		base.Path = strings.TrimSuffix(base.Path, "/") + PyroscopePushPath
	}
	p.url = base.String()
	return p, nil
}

// Name says which API of which server the profiles go to.
func (p *pyroscope) Name() string {
	if p.ingest {
		return "pyroscope /ingest " + p.url
	}
	return "pyroscope push " + p.url
}

// Send delivers one profile with one request.
func (p *pyroscope) Send(ctx context.Context, prof *Profile) error {
	if p.ingest {
		return p.sendIngest(ctx, prof)
	}
	_, err := post(ctx, p.o, p.url, "application/proto", pushRequest(prof), http.Header{"Connect-Protocol-Version": {"1"}})
	return err
}

// pushRequest encodes a push.v1.PushRequest of one series: prof's
// labels, with __name__ process_cpu, sorted by name, and its pprof as
// the one raw sample.
//
//	PushRequest{ repeated RawProfileSeries series = 1 }
//	RawProfileSeries{ repeated LabelPair labels = 1; repeated RawSample samples = 2 }
//	LabelPair{ string name = 1; string value = 2 }
//	RawSample{ bytes raw_profile = 1; string ID = 2 }
func pushRequest(prof *Profile) []byte {
	var series []byte
	for _, k := range sortedKeys(prof.Labels, "__name__") {
		v := prof.Labels[k]
		if k == "__name__" {
			v = PyroscopeProfileName
		}
		var pair []byte
		pair = protowire.AppendTag(pair, 1, protowire.BytesType)
		pair = protowire.AppendString(pair, k)
		pair = protowire.AppendTag(pair, 2, protowire.BytesType)
		pair = protowire.AppendString(pair, v)
		series = protowire.AppendTag(series, 1, protowire.BytesType)
		series = protowire.AppendBytes(series, pair)
	}
	var sample []byte
	sample = protowire.AppendTag(sample, 1, protowire.BytesType)
	sample = protowire.AppendBytes(sample, prof.Data)
	series = protowire.AppendTag(series, 2, protowire.BytesType)
	series = protowire.AppendBytes(series, sample)
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	return protowire.AppendBytes(req, series)
}

// sortedKeys returns m's keys and extra, sorted, each once.
func sortedKeys(m map[string]string, extra ...string) []string {
	keys := make([]string, 0, len(m)+len(extra))
	for k := range m {
		keys = append(keys, k)
	}
	keys = append(keys, extra...)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// sendIngest posts prof to /ingest: the query names the application
// (service_name{other labels}), the interval (from, until: Unix
// seconds) and the format; the pprof is the multipart field "profile".
func (p *pyroscope) sendIngest(ctx context.Context, prof *Profile) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("profile", "profile.pprof")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	fw.Write(prof.Data)
	mw.Close()
	q := url.Values{}
	q.Set("name", IngestName(prof.Labels))
	q.Set("from", strconv.FormatInt(prof.Start.Unix(), 10))
	q.Set("until", strconv.FormatInt(prof.Start.Add(prof.Duration).Unix(), 10))
	q.Set("format", "pprof")
	q.Set("spyName", "gprofile")
	if prof.Profile != nil && prof.Profile.Period > 0 && prof.Profile.PeriodType != nil && prof.Profile.PeriodType.Unit == "nanoseconds" {
		q.Set("sampleRate", strconv.FormatInt(1e9/prof.Profile.Period, 10))
	}
	_, err = post(ctx, p.o, p.url+"?"+q.Encode(), mw.FormDataContentType(), body.Bytes(), nil)
	return err
}

// IngestName returns the application name of Pyroscope's /ingest API for
// labels: the service_name, then the other labels in braces, sorted by
// name (myservice{host=a,kernel=6.1.0}). Characters the name's grammar
// gives a meaning (",", "=", "{", "}") become "_" in values and names.
func IngestName(labels map[string]string) string {
	var b strings.Builder
	b.WriteString(ingestClean(labels[LabelServiceName]))
	sep := "{"
	for _, k := range sortedKeys(labels) {
		if k == LabelServiceName {
			continue
		}
		b.WriteString(sep + ingestClean(k) + "=" + ingestClean(labels[k]))
		sep = ","
	}
	if sep == "," {
		b.WriteString("}")
	}
	return b.String()
}

// ingestClean replaces the characters of s that /ingest's name grammar
// reserves with "_".
func ingestClean(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ',', '=', '{', '}':
			return '_'
		}
		return r
	}, s)
}
