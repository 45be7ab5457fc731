package unwind

import "testing"

// TestProcRoot: the root separate debug files are looked up in, for the
// paths the symbolizer gives an object.
func TestProcRoot(t *testing.T) {
	for path, want := range map[string]string{
		"/proc/42/root/usr/lib/libc.so.6":     "/proc/42/root",
		"/proc/42/map_files/7f00-7f80":        "/proc/42/root",
		"/usr/lib/x86_64-linux-gnu/libc.so.6": "",
		"/proc/42/exe":                        "",
		"/proc/42":                            "",
		"/proc/self/root/bin/true":            "/proc/self/root",
	} {
		if got := procRoot(path); got != want {
			t.Errorf("procRoot(%q) = %q, want %q", path, got, want)
		}
	}
}
