package debuginfod

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
	"github.com/gprofile/gprofile/internal/symbolize/internal/textscan"
)

// Defaults of the debuginfod client, as elfutils' client names them.
const (
	// debuginfodTimeout is the default of DEBUGINFOD_TIMEOUT: how long a
	// server may take to connect and send its response headers, and how
	// long a download may then go without receiving a byte.
	debuginfodTimeout = 10 * time.Second
	// MaxTime is the default of DEBUGINFOD_MAXTIME: how long
	// one download may take in all.
	MaxTime = 120 * time.Second
	// CacheMiss is how long an on-disk "not found" entry stands
	// when the cache has no cache_miss_s file (elfutils' default, 600 s).
	CacheMiss = 600 * time.Second
	// debuginfodServerRetry is how long a server that failed (timed out,
	// refused the connection, answered 5xx) is skipped: one slow server
	// costs one timeout, not one per binary.
	debuginfodServerRetry = 5 * time.Minute
)

// Config is the client's configuration, read from the same
// environment variables as elfutils' debuginfod client.
type Config struct {
	URLs    []string      // DEBUGINFOD_URLS: http(s) server URLs, space separated, tried in order
	Cache   string        // DEBUGINFOD_CACHE_PATH, else $XDG_CACHE_HOME/debuginfod_client, else $HOME/.cache/debuginfod_client
	Timeout time.Duration // DEBUGINFOD_TIMEOUT, seconds (fractions allowed)
	MaxTime time.Duration // DEBUGINFOD_MAXTIME, seconds
	MaxSize int64         // DEBUGINFOD_MAXSIZE, bytes, at most maxBinaryBytes
	Skipped []string      // URLs of DEBUGINFOD_URLS ignored (not http or https)
}

// ReadConfig reads the configuration from getenv (os.Getenv, say), as
// elfutils' client reads its environment. ok is false when
// DEBUGINFOD_URLS names no server, or no cache directory can be named:
// the client is then off.
func ReadConfig(getenv func(string) string) (c Config, ok bool) {
	for _, u := range strings.Fields(getenv("DEBUGINFOD_URLS")) {
		if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
			c.URLs = append(c.URLs, strings.TrimRight(u, "/"))
		} else {
			c.Skipped = append(c.Skipped, u)
		}
	}
	switch {
	case getenv("DEBUGINFOD_CACHE_PATH") != "":
		c.Cache = getenv("DEBUGINFOD_CACHE_PATH")
	case getenv("XDG_CACHE_HOME") != "":
		c.Cache = filepath.Join(getenv("XDG_CACHE_HOME"), "debuginfod_client")
	case getenv("HOME") != "":
		c.Cache = filepath.Join(getenv("HOME"), ".cache", "debuginfod_client")
	}
	c.Timeout = envSeconds(getenv("DEBUGINFOD_TIMEOUT"), debuginfodTimeout)
	c.MaxTime = envSeconds(getenv("DEBUGINFOD_MAXTIME"), MaxTime)
	c.MaxSize = elfio.MaxBinaryBytes
	if n, err := strconv.ParseInt(getenv("DEBUGINFOD_MAXSIZE"), 10, 64); err == nil && n > 0 && n < c.MaxSize {
		c.MaxSize = n
	}
	return c, len(c.URLs) > 0 && c.Cache != ""
}

// envSeconds parses a positive number of seconds, or returns def.
func envSeconds(s string, def time.Duration) time.Duration {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || v > 1e6 {
		return def
	}
	return time.Duration(v * float64(time.Second))
}

// Client fetches separate debug files by build ID from
// debuginfod servers into the on-disk cache. It is safe for concurrent
// use.
type Client struct {
	cfg  Config
	http *http.Client

	mu     sync.Mutex
	misses map[string]bool      // build IDs found nowhere this run
	got    map[string]bool      // build IDs downloaded or found cached
	down   map[string]time.Time // server URL: skipped until then
	counts debuginfodCounts
}

// debuginfodCounts counts what the client did, for DebuginfodNote.
type debuginfodCounts struct {
	downloaded, cached, notFound, failed int
	bytes                                int64  // downloaded
	lastErr                              string // of the last failure
	// pending counts the downloads queued or under way in the
	// background, cancelled those a Symbolizer's Close stopped.
	pending, cancelled int
}

// ValidBuildID reports whether id is a hex build ID of 2 to 64 bytes,
// safe in a URL and a cache path.
func ValidBuildID(id string) bool {
	if len(id) < 4 || len(id) > 128 || len(id)%2 != 0 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if textscan.HexDigit[id[i]] > 0xf || (id[i] >= 'A' && id[i] <= 'F') {
			return false
		}
	}
	return true
}

// Cached answers from what is known without the network: the path of
// the cached debug file of build ID id, or "" for a build ID missed once
// this run or marked missing on disk less than cache_miss_s ago. known
// is false when only a download can tell (see get).
func (c *Client) Cached(id string) (path string, known bool) {
	c.mu.Lock()
	missed := c.misses[id]
	c.mu.Unlock()
	if missed {
		return "", true
	}
	path = filepath.Join(c.cfg.Cache, id, "debuginfo")
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
		if st.Size() > 0 {
			c.count(func(n *debuginfodCounts) {
				if !c.got[id] { // counted once, as downloaded or cached
					c.got[id] = true
					n.cached++
				}
			})
			return path, true
		}
		if time.Since(st.ModTime()) < c.cacheMiss() {
			c.miss(id)
			return "", true
		}
		os.Remove(path) // the miss has expired: ask again
	}
	return "", false
}

// Get downloads the debug file of id (for a binary of kind k) and
// returns its path in the cache, or "" when no server sent it: the miss
// is remembered for the run and, when every server answered 404, on disk.
// A download cancelled through ctx is neither.
func (c *Client) Get(ctx context.Context, k Kind, id string) string {
	path, allMissing := c.download(ctx, k, id)
	if path == "" && ctx.Err() == nil {
		c.miss(id)
		if allMissing {
			c.markMissing(id)
		}
	}
	return path
}

// miss remembers, for this run, that id was found nowhere.
func (c *Client) miss(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.misses[id] = true
}

// count updates the counters under the lock.
func (c *Client) count(update func(*debuginfodCounts)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	update(&c.counts)
}

// cacheMiss returns how long a "not found" entry stands: the seconds in
// the cache's cache_miss_s file (as elfutils keeps it), else 600 s.
func (c *Client) cacheMiss() time.Duration {
	b, err := os.ReadFile(filepath.Join(c.cfg.Cache, "cache_miss_s"))
	if err != nil {
		return CacheMiss
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return CacheMiss
	}
	return time.Duration(n) * time.Second
}

// markMissing leaves the on-disk "not found" entry of id, as elfutils
// does: an empty {cache}/{id}/debuginfo, whose modification time says
// when. An existing file is left alone.
func (c *Client) markMissing(id string) {
	dir := filepath.Join(c.cfg.Cache, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	if f, err := os.OpenFile(filepath.Join(dir, "debuginfo"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
		f.Close()
	}
}

// Note returns one line on what c did, such as "debuginfod: 2 debug files downloaded (3.1 MiB),
// 1 from the cache, 4 not found, 1 failed (last: ...), 2 unfinished at
// exit", or "" when c is nil (debuginfod is off) or no binary needed it.
// Counts are of distinct build IDs. A failure (timeout, refused
// connection, an answer that is not the right ELF file, a download over
// DEBUGINFOD_MAXSIZE) leaves that binary without its debug information
// for the rest of the run; its frames keep what the binary's own symbols
// give. "Unfinished" downloads were still queued or under way in the
// background (a Symbolizer's Close cancels them): frames sampled before a
// download completes have no source lines.
func (c *Client) Note() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	n := c.counts
	c.mu.Unlock()
	if n == (debuginfodCounts{}) {
		return ""
	}
	s := fmt.Sprintf("debuginfod: %d debug files downloaded (%.1f MiB), %d from the cache, %d not found, %d failed",
		n.downloaded, float64(n.bytes)/(1<<20), n.cached, n.notFound, n.failed)
	if n.lastErr != "" {
		s += " (last: " + n.lastErr + ")"
	}
	if n.pending+n.cancelled > 0 {
		s += fmt.Sprintf(", %d unfinished at exit", n.pending+n.cancelled)
	}
	return s
}
