package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSkipfHelper is run by TestSkipf in a child test binary: it asks for a
// tool that does not exist.
func TestSkipfHelper(t *testing.T) {
	if os.Getenv("TESTUTIL_CHILD") != "1" {
		t.Skip("run by TestSkipf")
	}
	RequireTool(t, "no-such-tool-gprofile", "the test needs it")
	t.Log("RequireTool returned")
}

// TestSkipf runs TestSkipfHelper with and without GPROFILE_REQUIRE_PRIV=1:
// without, it skips saying why; with, it fails saying why.
func TestSkipf(t *testing.T) {
	for _, c := range []struct {
		require  string
		wantFail bool
		want     string
	}{
		{"", false, "--- SKIP: TestSkipfHelper"},
		{"0", false, "--- SKIP: TestSkipfHelper"},
		{"1", true, "--- FAIL: TestSkipfHelper"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSkipfHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTUTIL_CHILD=1", RequireEnv+"="+c.require)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.wantFail || !strings.Contains(string(out), c.want) ||
			!strings.Contains(string(out), "no-such-tool-gprofile not found on PATH") ||
			!strings.Contains(string(out), "the test needs it") || strings.Contains(string(out), "RequireTool returned") {
			t.Errorf("%s=%q: err %v, want fail=%v and %q with the reason; output:\n%s", RequireEnv, c.require, err, c.wantFail, c.want, out)
		}
	}
}
