package testutil

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RunChromium runs headless Chromium (Debian's chromium package) on url
// with extra arguments (--dump-dom, --screenshot=FILE, ...) and returns
// its standard output. It skips t without chromium, or fails it under
// GPROFILE_REQUIRE_PRIV=1 (CI installs it). Background networking is off:
// this machine has no network, and the pages tested need none.
func RunChromium(t testing.TB, url string, extra ...string) []byte {
	t.Helper()
	chromium := RequireTool(t, "chromium")
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(t.TempDir(), "chromium"), "--virtual-time-budget=5000"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append(append(args, extra...), url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return stdout.Bytes()
}
