package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// DefaultServerCache is where scripts/build-test-servers.sh builds the
// test servers when GPROFILE_CI_CACHE is not set.
const DefaultServerCache = "/var/cache/gprofile-ci"

// TestServer returns the path of the real server binary name ("parca" or
// "otelcol") that scripts/build-test-servers.sh built: $GPROFILE_PARCA or
// $GPROFILE_OTELCOL when set, else $GPROFILE_CI_CACHE/bin/NAME (default
// /var/cache/gprofile-ci/bin/NAME). Without it, it skips t with the
// command that builds it (fails t under GPROFILE_REQUIRE_PRIV=1, where
// .ci/run has built it; see Skipf).
func TestServer(t testing.TB, name string) string {
	t.Helper()
	env := "GPROFILE_" + strings.ToUpper(name)
	p := os.Getenv(env)
	if p == "" {
		cache := os.Getenv("GPROFILE_CI_CACHE")
		if cache == "" {
			cache = DefaultServerCache
		}
		p = filepath.Join(cache, "bin", name)
	}
	if _, err := os.Stat(p); err != nil {
		Skipf(t, "no %s server binary: %v (build it with scripts/build-test-servers.sh %s, or set %s)", name, err, name, env)
	}
	return p
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on at the
// time of the call, for a server started by a test.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartServer starts the server cmd (its output goes to a log file in
// t.TempDir()), waits until addr (host:port) accepts TCP connections, and
// stops it when t ends. It fails t, with the log's tail, when the server
// exits or does not listen within a minute.
func StartServer(t testing.TB, cmd *exec.Cmd, addr string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(cmd.Path)+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		log.Close()
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(cmd.Path), tail(logPath, 4000))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited before listening on %s: %v\n%s", cmd.Path, addr, err, tail(logPath, 4000))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s after a minute\n%s", cmd.Path, addr, tail(logPath, 4000))
		}
	}
}

// tail returns the last n bytes of the file at path, or why it cannot.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprint(err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
