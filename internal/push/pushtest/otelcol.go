package pushtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/slim/otlp/common/v1"
	profpb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
	"google.golang.org/protobuf/proto"

	"github.com/gprofile/gprofile/internal/testutil"
)

// Collector is an OpenTelemetry Collector started for one test: its
// OTLP receiver takes profiles over HTTP and its file exporter writes
// them, as the collector decoded them, to Out.
type Collector struct {
	// Addr is where its OTLP/HTTP receiver listens: 127.0.0.1:PORT.
	Addr string
	// Out is the file exporter's file: length-prefixed (4 bytes, big
	// endian) binary ProfilesData messages.
	Out string
}

// StartCollector starts the collector that scripts/build-test-servers.sh
// built (it skips t without it; see testutil.TestServer) with the
// service.profilesSupport feature gate on and one profiles pipeline (OTLP
// receiver, HTTP only, to the file exporter, flushing every 100 ms), and
// stops it when t ends.
func StartCollector(t testing.TB) *Collector {
	t.Helper()
	bin := testutil.TestServer(t, "otelcol")
	dir := t.TempDir()
	c := &Collector{
		Addr: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		Out:  filepath.Join(dir, "profiles.binpb"),
	}
	conf := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %q
exporters:
  file:
    path: %q
    format: proto
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [file]
`, c.Addr, c.Out)
	cfg := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config=file:"+cfg, "--feature-gates=service.profilesSupport")
	cmd.Dir = dir
	testutil.StartServer(t, cmd, c.Addr)
	return c
}

// Received returns the ProfilesData messages the file exporter has
// written so far, in order. A message cut short at the end (the exporter
// is still writing it) is left for the next call.
func (c *Collector) Received() ([]*profpb.ProfilesData, error) {
	data, err := os.ReadFile(c.Out)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*profpb.ProfilesData
	for len(data) >= 4 {
		n := binary.BigEndian.Uint32(data)
		if uint64(len(data)-4) < uint64(n) {
			break
		}
		var pd profpb.ProfilesData
		if err := proto.Unmarshal(data[4:4+n], &pd); err != nil {
			return out, fmt.Errorf("%s: message %d: %w", c.Out, len(out), err)
		}
		out = append(out, &pd)
		data = data[4+n:]
	}
	return out, nil
}

// AnyString returns v's string, held in place or (string_value_strindex,
// as the collector writes profiles' attributes) in d's string table.
func AnyString(v *commonpb.AnyValue, d *profpb.ProfilesDictionary) string {
	if i, ok := v.GetValue().(*commonpb.AnyValue_StringValueStrindex); ok {
		if int(i.StringValueStrindex) < len(d.GetStringTable()) {
			return d.GetStringTable()[i.StringValueStrindex]
		}
		return fmt.Sprintf("<string %d out of range>", i.StringValueStrindex)
	}
	return v.GetStringValue()
}

// Stacks returns, for each profile in pd whose sample type is
// typ/unit, its samples as root-first function names joined by ";" with
// the sum of their values; and the resource attributes (string values,
// keys and values held in place or in the string table) of the profiles
// it read, one map per profile.
func Stacks(pd *profpb.ProfilesData, typ, unit string) (map[string]int64, []map[string]string) {
	d := pd.GetDictionary()
	str := func(i int32) string {
		if int(i) < len(d.GetStringTable()) {
			return d.GetStringTable()[i]
		}
		return fmt.Sprintf("<string %d out of range>", i)
	}
	stacks := map[string]int64{}
	var resources []map[string]string
	for _, rp := range pd.GetResourceProfiles() {
		res := map[string]string{}
		for _, kv := range rp.GetResource().GetAttributes() {
			k := kv.GetKey()
			if kv.GetKeyStrindex() != 0 {
				k = str(kv.GetKeyStrindex())
			}
			res[k] = AnyString(kv.GetValue(), d)
		}
		for _, sp := range rp.GetScopeProfiles() {
			for _, p := range sp.GetProfiles() {
				st := p.GetSampleType()
				if str(st.GetTypeStrindex()) != typ || str(st.GetUnitStrindex()) != unit {
					continue
				}
				resources = append(resources, res)
				for _, s := range p.GetSamples() {
					var names []string
					locs := d.GetStackTable()[s.GetStackIndex()].GetLocationIndices()
					for i := len(locs) - 1; i >= 0; i-- {
						lines := d.GetLocationTable()[locs[i]].GetLines()
						for j := len(lines) - 1; j >= 0; j-- {
							names = append(names, str(d.GetFunctionTable()[lines[j].GetFunctionIndex()].GetNameStrindex()))
						}
					}
					key := strings.Join(names, ";")
					for _, v := range s.GetValues() {
						stacks[key] += v
					}
				}
			}
		}
	}
	return stacks, resources
}
