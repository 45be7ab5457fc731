package main

import (
	"strings"
	"testing"
	"time"

	profpb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"

	"github.com/gprofile/gprofile/internal/push"
	"github.com/gprofile/gprofile/internal/push/pushtest"
	"github.com/gprofile/gprofile/internal/testutil"
)

// TestPushOTLP pushes chain's profile every second for 3.5 s to a real
// OpenTelemetry Collector (scripts/build-test-servers.sh builds it) and
// reads what its file exporter wrote: one message per profile pushed,
// the collector decoded them (main;chain_a;chain_b;chain_c is in them,
// with chain's build ID), the resource carries the service and labels
// given, and the samples add up to what gprofile counted.
func TestPushOTLP(t *testing.T) {
	testutil.RequirePrivileges(t)
	srv := pushtest.StartCollector(t)
	samples, pushed, stderr := pushChain(t, "otlp://"+srv.Addr)
	if pushed < 3 {
		t.Fatalf("%d profiles pushed in 3.5 s at 1 s intervals, want at least 3\n%s", pushed, stderr)
	}
	var got []*profpb.ProfilesData
	var err error
	for deadline := time.Now().Add(30 * time.Second); len(got) < pushed && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, err = srv.Received(); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != pushed {
		t.Fatalf("the collector wrote %d messages, gprofile pushed %d", len(got), pushed)
	}
	var total int64
	chained, built := false, false
	for i, pd := range got {
		stacks, res := pushtest.Stacks(pd, "samples", "count")
		for st, n := range stacks {
			total += n
			chained = chained || hasChain(strings.Split(st, ";"), []string{"main", "chain_a", "chain_b", "chain_c"})
		}
		for _, r := range res {
			if r["service.name"] != "chainsvc" || r["env"] != "ci" || r["host.name"] == "" || r["os.version"] == "" {
				t.Errorf("message %d: resource %v, want service.name chainsvc, env ci, host.name and os.version", i, r)
			}
		}
		d := pd.GetDictionary()
		for _, mp := range d.GetMappingTable() {
			for _, a := range mp.GetAttributeIndices() {
				kv := d.AttributeTable[a]
				built = built || strings.HasSuffix(d.StringTable[mp.FilenameStrindex], "/chain") &&
					d.StringTable[kv.KeyStrindex] == push.OTLPBuildIDAttr && pushtest.AnyString(kv.Value, d) != ""
			}
		}
	}
	if total != samples || !chained || !built {
		t.Errorf("the collector holds %d samples (main;…;chain_c in them: %v, chain's build ID: %v); gprofile counted %d\n%s",
			total, chained, built, samples, stderr)
	}
}
