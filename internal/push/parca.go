package push

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Parca's label and API names.
const (
	// ParcaProfileName is the __name__ label of the profiles sent to
	// Parca: the name its scrape configuration gives a process's CPU
	// profile. Parca names each series
	// process_cpu:SAMPLE_TYPE:SAMPLE_UNIT:cpu:nanoseconds:delta, one per
	// sample type of the pprof.
	ParcaProfileName = "process_cpu"
	// ParcaWriteRawPath is the path, under Parca's API prefix, of the
	// HTTP gateway of ProfileStoreService.WriteRaw.
	ParcaWriteRawPath = "/api/profiles/writeraw"
)

// parca sends to Parca's ProfileStoreService.WriteRaw through its HTTP
// gateway (JSON body, the pprof base64-encoded), which the Parca server
// serves on its HTTP port beside gRPC.
type parca struct {
	url string // of WriteRaw's gateway
	o   Options
}

// newParca returns the Parca backend for u (scheme http or https): u's
// path, if any, is the prefix Parca serves under (its --path-prefix, or a
// reverse proxy's).
func newParca(u *url.URL, o Options) (Backend, error) {
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("parca URL %s: a query or fragment is not used (write parca://HOST:PORT, or parca+https://HOST:PORT/PREFIX)", u.Redacted())
	}
	if u.User != nil {
		return nil, fmt.Errorf("parca URL %s: credentials go in headers, not the URL (give them with gprofile's push auth flags)", u.Redacted())
	}
	base := *u
	base.Path = strings.TrimSuffix(base.Path, "/") + ParcaWriteRawPath
	return &parca{url: base.String(), o: o}, nil
}

// Name says which server the profiles go to.
func (p *parca) Name() string { return "parca writeraw " + p.url }

// Send delivers one profile with one WriteRaw request of one series.
func (p *parca) Send(ctx context.Context, prof *Profile) error {
	body, err := json.Marshal(writeRawRequest(prof))
	if err != nil {
		return fmt.Errorf("%w: encode WriteRaw request: %w", ErrPermanent, err)
	}
	_, err = post(ctx, p.o, p.url, "application/json", body, nil)
	return err
}

// The JSON shapes of parca.profilestore.v1alpha1's WriteRawRequest, as
// the gateway reads them (protojson: lowerCamelCase names, bytes as
// base64).
type (
	parcaWriteRaw struct {
		Series []parcaSeries `json:"series"`
	}
	parcaSeries struct {
		Labels  parcaLabelSet `json:"labels"`
		Samples []parcaSample `json:"samples"`
	}
	parcaLabelSet struct {
		Labels []parcaLabel `json:"labels"`
	}
	parcaLabel struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	parcaSample struct {
		RawProfile []byte `json:"rawProfile"`
	}
)

// writeRawRequest returns the WriteRaw request for prof: one series
// whose labels are ParcaLabels(prof.Labels) and whose one sample is the
// gzipped pprof (Parca unzips it).
func writeRawRequest(prof *Profile) parcaWriteRaw {
	var ls []parcaLabel
	for _, l := range ParcaLabels(prof.Labels) {
		ls = append(ls, parcaLabel{Name: l[0], Value: l[1]})
	}
	return parcaWriteRaw{Series: []parcaSeries{{
		Labels:  parcaLabelSet{Labels: ls},
		Samples: []parcaSample{{RawProfile: prof.Data}},
	}}}
}

// ParcaLabels returns the label set Parca stores for labels, as name,
// value pairs sorted by name: __name__ is ParcaProfileName; each name is
// made a valid Prometheus label name (Parca refuses others) by replacing
// every character but ASCII letters, digits and "_" with "_" and putting
// "_" before a leading digit; labels with an empty value are left out (as
// Prometheus does), so are names that begin with "__" (reserved) and a
// name that equals an earlier one once made valid.
func ParcaLabels(labels map[string]string) [][2]string {
	out := [][2]string{{"__name__", ParcaProfileName}}
	seen := map[string]bool{"__name__": true}
	for _, k := range sortedKeys(labels) {
		name := promLabelName(k)
		if labels[k] == "" || strings.HasPrefix(name, "__") || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, [2]string{name, labels[k]})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// promLabelName makes s a valid Prometheus label name
// ([a-zA-Z_][a-zA-Z0-9_]*), one "_" for each character that is not.
func promLabelName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return "_" + s
	}
	return s
}
