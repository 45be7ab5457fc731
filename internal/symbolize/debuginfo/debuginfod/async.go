package debuginfod

import (
	"context"
	"sync"
	"sync/atomic"
)

// MaxDownloads caps the downloads one Symbolizer runs at the
// same time; the others wait their turn.
const MaxDownloads = 2

// Fetcher runs a Symbolizer's debuginfod downloads in the
// background, so that symbolizing (and behind it, the reading of
// samples) never waits on the network: at most one download per build ID
// (later requests for it while it runs are dropped), at most
// maxDebuginfodDownloads at a time. Each completed download is queued
// for the Symbolizer, which picks the queue up at its next Stack (see
// Symbolizer.applyArrivals), and bumps gen. It is safe for concurrent
// use; its goroutines never take the Symbolizer's lock.
type Fetcher struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{} // one token per running download
	Gen    atomic.Uint64 // completed downloads (see Symbolizer.Generation)

	mu      sync.Mutex
	closed  bool
	active  map[string]bool // build IDs queued or downloading
	done    map[string]bool // build IDs downloaded: never asked again
	arrived []string        // build IDs downloaded, not yet applied
}

// NewFetcher returns a fetcher with nothing under way.
func NewFetcher() *Fetcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &Fetcher{
		ctx: ctx, cancel: cancel,
		slots:  make(chan struct{}, MaxDownloads),
		active: make(map[string]bool),
		done:   make(map[string]bool),
	}
}

// Start downloads the debug file of build ID id (for a binary of kind
// k) through c in the background, unless it is under way or done
// already, or the fetcher is closed. It never blocks.
func (d *Fetcher) Start(c *Client, k Kind, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.active[id] || d.done[id] {
		return
	}
	d.active[id] = true
	d.wg.Add(1)
	c.count(func(n *debuginfodCounts) { n.pending++ })
	go d.run(c, k, id)
}

// run waits for a slot, downloads, and records the outcome.
func (d *Fetcher) run(c *Client, k Kind, id string) {
	defer d.wg.Done()
	path := ""
	select {
	case d.slots <- struct{}{}:
		path = c.Get(d.ctx, k, id)
		<-d.slots
	case <-d.ctx.Done():
	}
	cancelled := d.ctx.Err() != nil
	c.count(func(n *debuginfodCounts) {
		n.pending--
		if cancelled {
			n.cancelled++
		}
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.active, id)
	if path != "" && !cancelled {
		d.done[id] = true
		d.arrived = append(d.arrived, id)
		d.Gen.Add(1)
	}
}

// Take returns the build IDs downloaded since the last take, and the
// generation they bring the Symbolizer to.
func (d *Fetcher) Take() (ids []string, gen uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids, d.arrived = d.arrived, nil
	return ids, d.Gen.Load()
}

// Close cancels the downloads under way or queued and waits for their
// goroutines to end (a download being cancelled ends within a few ms).
// It is idempotent; start does nothing after it.
func (d *Fetcher) Close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
}
