package push

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
	collpb "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	commonpb "go.opentelemetry.io/proto/slim/otlp/common/v1"
	profpb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
	resourcepb "go.opentelemetry.io/proto/slim/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

// OTLP's names, as the OpenTelemetry profiles signal (alpha) defines them.
const (
	// OTLPProfilesPath is the path of OTLP/HTTP's profiles export, under
	// the URL's path: the collector's OTLP receiver serves it.
	OTLPProfilesPath = "/v1development/profiles"
	// OTLPScopeName is the instrumentation scope of the profiles sent.
	OTLPScopeName = "github.com/gprofile/gprofile"
	// OTLPBuildIDAttr is the mapping attribute that holds a mapping's
	// GNU build ID (hex), so that a backend can re-symbolize it.
	OTLPBuildIDAttr = "process.executable.build_id.gnu"
	// OTLPCommentAttr is the profile attribute that holds the pprof's
	// comments, one a line.
	OTLPCommentAttr = "pprof.comments"
)

// otlpResourceAttr names the resource attribute a push label becomes,
// by OpenTelemetry's semantic conventions; other labels keep their name.
var otlpResourceAttr = map[string]string{
	LabelServiceName: "service.name",
	"host":           "host.name",
	"kernel":         "os.version",
}

// otlp sends OTLP profiles (ExportProfilesServiceRequest, binary
// protobuf) over HTTP, as the collector's OTLP receiver takes them. The
// profiles signal is alpha: the format is the one of
// go.opentelemetry.io/proto/slim/otlp/profiles/v1development v0.4.0,
// which OpenTelemetry Collector v0.161.0 reads.
type otlp struct {
	url string // of the profiles export
	o   Options
}

// newOTLP returns the OTLP backend for u (scheme http or https): u's
// path, if any, is a prefix before OTLPProfilesPath (a reverse proxy's).
func newOTLP(u *url.URL, o Options) (Backend, error) {
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("otlp URL %s: a query or fragment is not used (write otlp://HOST:4318, or otlp+https://HOST:PORT/PREFIX)", u.Redacted())
	}
	if u.User != nil {
		return nil, fmt.Errorf("otlp URL %s: credentials go in headers, not the URL (give them with gprofile's push auth flags)", u.Redacted())
	}
	base := *u
	base.Path = strings.TrimSuffix(base.Path, "/") + OTLPProfilesPath
	return &otlp{url: base.String(), o: o}, nil
}

// Name says which server the profiles go to.
func (b *otlp) Name() string { return "otlp " + b.url }

// Send delivers one profile as one export request. A request the server
// takes but partly rejects (partial_success) is a permanent error naming
// how many profiles it rejected and why.
func (b *otlp) Send(ctx context.Context, prof *Profile) error {
	if prof.Profile == nil {
		return fmt.Errorf("%w: otlp: the profile has no parsed pprof", ErrPermanent)
	}
	req := OTLPRequest(prof.Profile, prof.Labels)
	body, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: encode OTLP profiles: %w", ErrPermanent, err)
	}
	answer, err := post(ctx, b.o, b.url, "application/x-protobuf", body, nil)
	if err != nil {
		return err
	}
	var resp collpb.ExportProfilesServiceResponse
	if err := proto.Unmarshal(answer, &resp); err != nil {
		// A 2xx answer that is not a response message still took the data.
		return nil
	}
	if ps := resp.GetPartialSuccess(); ps != nil && ps.GetRejectedProfiles() > 0 {
		return fmt.Errorf("%w: %s rejected %d of %d profiles: %s", ErrPermanent, b.url,
			ps.GetRejectedProfiles(), len(req.ResourceProfiles[0].ScopeProfiles[0].Profiles), ps.GetErrorMessage())
	}
	return nil
}

// OTLPRequest converts p, one interval's pprof, into an OTLP profiles
// export request: one resource (attributes from labels: service_name,
// host and kernel become service.name, host.name and os.version, others
// keep their names; empty values are left out), one scope, and one
// Profile per pprof sample type (OTLP's Profile carries one value type),
// all sharing one dictionary. Time, duration, period and period type are
// p's; the pprof's comments (drop counts among them) become one profile
// attribute, OTLPCommentAttr, joined by newlines. Stacks are leaf first, as in pprof; a pprof sample's string labels
// become sample attributes, its numeric labels are dropped; mappings keep
// their file, range, offset and build ID (OTLPBuildIDAttr). Samples with
// a zero value in a column are left out of that column's profile.
func OTLPRequest(p *profile.Profile, labels map[string]string) *collpb.ExportProfilesServiceRequest {
	d := newOTLPDict()
	var res []*commonpb.KeyValue
	for _, k := range sortedKeys(labels) {
		if labels[k] == "" {
			continue
		}
		name := k
		if n, ok := otlpResourceAttr[k]; ok {
			name = n
		}
		res = append(res, &commonpb.KeyValue{Key: name, Value: strValue(labels[k])})
	}

	stacks := make([]int32, len(p.Sample))
	attrs := make([][]int32, len(p.Sample))
	for i, s := range p.Sample {
		stacks[i] = d.stack(s.Location)
		for _, k := range slices.Sorted(maps.Keys(s.Label)) {
			for _, v := range s.Label[k] {
				attrs[i] = append(attrs[i], d.attr(k, v))
			}
		}
	}

	var periodType *profpb.ValueType
	if p.PeriodType != nil {
		periodType = d.valueType(p.PeriodType)
	}
	var profAttrs []int32
	if len(p.Comments) > 0 {
		profAttrs = []int32{d.attr(OTLPCommentAttr, strings.Join(p.Comments, "\n"))}
	}
	var profs []*profpb.Profile
	for col, st := range p.SampleType {
		op := &profpb.Profile{
			SampleType:       d.valueType(st),
			TimeUnixNano:     uint64(p.TimeNanos),
			DurationNano:     uint64(p.DurationNanos),
			PeriodType:       periodType,
			Period:           p.Period,
			ProfileId:        profileID(),
			AttributeIndices: profAttrs,
		}
		for i, s := range p.Sample {
			if col >= len(s.Value) || s.Value[col] == 0 {
				continue
			}
			op.Samples = append(op.Samples, &profpb.Sample{
				StackIndex:       stacks[i],
				AttributeIndices: attrs[i],
				Values:           []int64{s.Value[col]},
			})
		}
		profs = append(profs, op)
	}
	return &collpb.ExportProfilesServiceRequest{
		ResourceProfiles: []*profpb.ResourceProfiles{{
			Resource: &resourcepb.Resource{Attributes: res},
			ScopeProfiles: []*profpb.ScopeProfiles{{
				Scope:    &commonpb.InstrumentationScope{Name: OTLPScopeName},
				Profiles: profs,
			}},
		}},
		Dictionary: d.ProfilesDictionary,
	}
}

// profileID returns a random 16-byte profile ID (never all zero: an
// all-zero ID is invalid).
func profileID() []byte {
	id := make([]byte, 16)
	rand.Read(id)
	id[0] |= 1
	return id
}

func strValue(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

// otlpDict builds a ProfilesDictionary: each table starts with its zero
// value, and each item is added once, found again by its pprof identity.
type otlpDict struct {
	*profpb.ProfilesDictionary
	strs   map[string]int32
	maps   map[*profile.Mapping]int32
	locs   map[*profile.Location]int32
	funcs  map[*profile.Function]int32
	attrs  map[[2]string]int32
	stacks map[string]int32 // by the location indices, 4 bytes each
	key    []byte           // stack's scratch key
}

func newOTLPDict() *otlpDict {
	return &otlpDict{
		ProfilesDictionary: &profpb.ProfilesDictionary{
			MappingTable:   []*profpb.Mapping{{}},
			LocationTable:  []*profpb.Location{{}},
			FunctionTable:  []*profpb.Function{{}},
			LinkTable:      []*profpb.Link{{TraceId: make([]byte, 16), SpanId: make([]byte, 8)}},
			StringTable:    []string{""},
			AttributeTable: []*profpb.KeyValueAndUnit{{}},
			StackTable:     []*profpb.Stack{{}},
		},
		strs:   map[string]int32{"": 0},
		maps:   map[*profile.Mapping]int32{},
		locs:   map[*profile.Location]int32{},
		funcs:  map[*profile.Function]int32{},
		attrs:  map[[2]string]int32{},
		stacks: map[string]int32{},
	}
}

func (d *otlpDict) str(s string) int32 {
	if i, ok := d.strs[s]; ok {
		return i
	}
	i := int32(len(d.StringTable))
	d.StringTable = append(d.StringTable, s)
	d.strs[s] = i
	return i
}

func (d *otlpDict) valueType(v *profile.ValueType) *profpb.ValueType {
	return &profpb.ValueType{TypeStrindex: d.str(v.Type), UnitStrindex: d.str(v.Unit)}
}

func (d *otlpDict) attr(k, v string) int32 {
	if i, ok := d.attrs[[2]string{k, v}]; ok {
		return i
	}
	i := int32(len(d.AttributeTable))
	d.AttributeTable = append(d.AttributeTable, &profpb.KeyValueAndUnit{KeyStrindex: d.str(k), Value: strValue(v)})
	d.attrs[[2]string{k, v}] = i
	return i
}

func (d *otlpDict) mapping(m *profile.Mapping) int32 {
	if m == nil {
		return 0
	}
	if i, ok := d.maps[m]; ok {
		return i
	}
	om := &profpb.Mapping{MemoryStart: m.Start, MemoryLimit: m.Limit, FileOffset: m.Offset, FilenameStrindex: d.str(m.File)}
	if m.BuildID != "" {
		om.AttributeIndices = []int32{d.attr(OTLPBuildIDAttr, m.BuildID)}
	}
	i := int32(len(d.MappingTable))
	d.MappingTable = append(d.MappingTable, om)
	d.maps[m] = i
	return i
}

func (d *otlpDict) function(f *profile.Function) int32 {
	if f == nil {
		return 0
	}
	if i, ok := d.funcs[f]; ok {
		return i
	}
	i := int32(len(d.FunctionTable))
	d.FunctionTable = append(d.FunctionTable, &profpb.Function{
		NameStrindex: d.str(f.Name), SystemNameStrindex: d.str(f.SystemName),
		FilenameStrindex: d.str(f.Filename), StartLine: f.StartLine,
	})
	d.funcs[f] = i
	return i
}

func (d *otlpDict) location(l *profile.Location) int32 {
	if i, ok := d.locs[l]; ok {
		return i
	}
	ol := &profpb.Location{MappingIndex: d.mapping(l.Mapping), Address: l.Address}
	for _, ln := range l.Line {
		ol.Lines = append(ol.Lines, &profpb.Line{FunctionIndex: d.function(ln.Function), Line: ln.Line, Column: ln.Column})
	}
	i := int32(len(d.LocationTable))
	d.LocationTable = append(d.LocationTable, ol)
	d.locs[l] = i
	return i
}

// stack returns the index of the stack of locs (leaf first).
func (d *otlpDict) stack(locs []*profile.Location) int32 {
	d.key = d.key[:0]
	for _, l := range locs {
		d.key = binary.LittleEndian.AppendUint32(d.key, uint32(d.location(l)))
	}
	if i, ok := d.stacks[string(d.key)]; ok {
		return i
	}
	idx := make([]int32, len(locs))
	for j := range idx {
		idx[j] = int32(binary.LittleEndian.Uint32(d.key[4*j:]))
	}
	i := int32(len(d.StackTable))
	d.StackTable = append(d.StackTable, &profpb.Stack{LocationIndices: idx})
	d.stacks[string(d.key)] = i
	return i
}
