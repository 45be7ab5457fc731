package debuginfod

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/gprofile/gprofile/internal/symbolize/elfio"
)

// errDebuginfodNotFound is a server's 404: it does not have the file.
var errDebuginfodNotFound = errors.New("not found")

// serverError is a failure of the server rather than of the file it
// sent (no connection, a timeout, a 5xx answer): the server is skipped
// for a while.
type serverError struct{ err error }

func (e *serverError) Error() string { return e.err.Error() }
func (e *serverError) Unwrap() error { return e.err }

// NewClient returns a client whose connections, TLS
// handshakes and response headers each time out after cfg.timeout, and
// which follows at most 10 redirects, to http and https URLs only. It
// uses the proxies of the environment (HTTPS_PROXY, NO_PROXY), as
// net/http's default transport does.
func NewClient(cfg Config) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = cfg.Timeout
	tr.ResponseHeaderTimeout = cfg.Timeout
	return &Client{
		cfg:    cfg,
		http:   &http.Client{Transport: tr, CheckRedirect: httpRedirectOnly},
		misses: make(map[string]bool),
		got:    make(map[string]bool),
		down:   make(map[string]time.Time),
	}
}

// httpRedirectOnly refuses redirects to other schemes than http and
// https (file://, say) and stops after 10.
func httpRedirectOnly(req *http.Request, via []*http.Request) error {
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return fmt.Errorf("redirect to a %s URL refused", req.URL.Scheme)
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// Kind is what a debug file must share with its binary besides the
// build ID: the ELF class and machine.
type Kind struct {
	class   elf.Class
	machine elf.Machine
}

// KindOf returns the class and machine of f.
func KindOf(f *elf.File) Kind { return Kind{f.Class, f.Machine} }

// download asks each server in turn for the debug file of id (for a
// binary of kind k) and returns its path in the cache once one sends
// it. allMissing is true when every server answered 404, the one outcome
// worth remembering on disk. When ctx is cancelled it returns "", false
// at once, and neither the server nor the build ID is held against.
func (c *Client) download(ctx context.Context, k Kind, id string) (path string, allMissing bool) {
	allMissing = true
	var failed error
	for _, u := range c.cfg.URLs {
		if c.isDown(u) {
			allMissing = false
			continue
		}
		path, n, err := c.fetch(ctx, u, k, id)
		if err == nil {
			c.count(func(n2 *debuginfodCounts) {
				n2.downloaded++
				n2.bytes += n
				c.got[id] = true
			})
			return path, false
		}
		if ctx.Err() != nil {
			return "", false
		}
		if errors.Is(err, errDebuginfodNotFound) {
			continue
		}
		allMissing, failed = false, err
		if se := (*serverError)(nil); errors.As(err, &se) {
			c.setDown(u)
		}
	}
	c.count(func(n *debuginfodCounts) {
		if failed != nil {
			n.failed++
			n.lastErr = failed.Error()
		} else {
			n.notFound++
		}
	})
	return "", allMissing
}

// isDown reports whether server u failed less than
// debuginfodServerRetry ago.
func (c *Client) isDown(u string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Before(c.down[u])
}

// setDown skips server u for debuginfodServerRetry.
func (c *Client) setDown(u string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down[u] = time.Now().Add(debuginfodServerRetry)
}

// fetch downloads {u}/buildid/{id}/debuginfo into the cache, atomically
// (a temporary file in the same directory, renamed once complete and
// checked), and returns its path and size. The file must be at most
// cfg.maxSize bytes, arrive within cfg.maxTime with no pause over
// cfg.timeout, and be an ELF file of kind k whose build ID is id.
// Cancelling parent stops it.
func (c *Client) fetch(parent context.Context, u string, k Kind, id string) (path string, size int64, err error) {
	url := u + "/buildid/" + id + "/debuginfo"
	ctx, cancel := context.WithTimeout(parent, c.cfg.MaxTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, fmt.Errorf("get %s: %w", url, err)
	}
	req.Header.Set("User-Agent", "gprofile")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", 0, &serverError{fmt.Errorf("get %s: %w", url, err)}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", 0, errDebuginfodNotFound
	case resp.StatusCode >= 500:
		return "", 0, &serverError{fmt.Errorf("get %s: %s", url, resp.Status)}
	case resp.StatusCode != http.StatusOK:
		return "", 0, fmt.Errorf("get %s: %s", url, resp.Status)
	case resp.ContentLength > c.cfg.MaxSize:
		return "", 0, fmt.Errorf("get %s: %d bytes, over the %d-byte cap", url, resp.ContentLength, c.cfg.MaxSize)
	}
	dir := filepath.Join(c.cfg.Cache, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, fmt.Errorf("make debuginfod cache: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "debuginfo.*.tmp")
	if err != nil {
		return "", 0, fmt.Errorf("make debuginfod cache file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	body := newIdleReader(resp.Body, c.cfg.Timeout, cancel)
	defer body.stop()
	size, err = io.Copy(tmp, io.LimitReader(body, c.cfg.MaxSize+1))
	switch {
	case err != nil && body.idle.Load():
		return "", 0, &serverError{fmt.Errorf("get %s: no data for %v", url, c.cfg.Timeout)}
	case err != nil && ctx.Err() != nil:
		return "", 0, &serverError{fmt.Errorf("get %s: not done in %v", url, c.cfg.MaxTime)}
	case err != nil:
		return "", 0, &serverError{fmt.Errorf("get %s: %w", url, err)}
	case size > c.cfg.MaxSize:
		return "", 0, fmt.Errorf("get %s: over the %d-byte cap", url, c.cfg.MaxSize)
	}
	if err = checkDebuginfo(tmp, k, id); err != nil {
		return "", 0, fmt.Errorf("get %s: %w", url, err)
	}
	path = filepath.Join(dir, "debuginfo")
	if err = tmp.Chmod(0o644); err == nil {
		err = tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", 0, fmt.Errorf("write debuginfod cache: %w", err)
	}
	return path, size, nil
}

// checkDebuginfo checks that the downloaded file is an ELF file of kind
// k with the GNU build ID id.
func checkDebuginfo(file *os.File, k Kind, id string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt ELF file: debug/elf panicked: %v", p)
		}
	}()
	ef, _, err := elfio.OpenELF(file)
	if err != nil {
		return fmt.Errorf("not an ELF file: %w", err)
	}
	if ef.Class != k.class || ef.Machine != k.machine {
		return fmt.Errorf("ELF file for %v %v, want %v %v", ef.Class, ef.Machine, k.class, k.machine)
	}
	if got := elfio.BuildID(ef); got != id {
		return fmt.Errorf("ELF file with build ID %q, want %s", got, id)
	}
	return nil
}

// idleReader reads r and calls cancel when no byte has come for d.
type idleReader struct {
	r     io.Reader
	d     time.Duration
	timer *time.Timer
	idle  atomic.Bool // the timer fired
}

// newIdleReader returns r watched for pauses over d.
func newIdleReader(r io.Reader, d time.Duration, cancel func()) *idleReader {
	ir := &idleReader{r: r, d: d}
	ir.timer = time.AfterFunc(d, func() {
		ir.idle.Store(true)
		cancel()
	})
	return ir
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
	}
	return n, err
}

// stop stops the timer.
func (r *idleReader) stop() { r.timer.Stop() }
