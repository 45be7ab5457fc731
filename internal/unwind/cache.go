package unwind

import "sync"

// tableCache holds tables by Object.Key, least recently used first out
// once their Bytes add up to more than max. A table is built once however
// many goroutines ask for it at the same time.
type tableCache struct {
	mu    sync.Mutex
	max   int
	bytes int
	m     map[string]*cacheEntry
	head  cacheEntry // sentinel: head.next is the most recently used
}

type cacheEntry struct {
	key        string
	tab        *Table
	size       int
	ready      chan struct{} // closed once tab is set
	prev, next *cacheEntry
}

func newTableCache(max int) *tableCache {
	c := &tableCache{max: max, m: map[string]*cacheEntry{}}
	c.head.prev, c.head.next = &c.head, &c.head
	return c
}

func (c *tableCache) unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (c *tableCache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

// get returns the table for key, building it with load on a miss. load's
// result (a table, possibly empty after an error) is cached too, so a
// broken file is read once.
func (c *tableCache) get(key string, load func() *Table) *Table {
	c.mu.Lock()
	if e := c.m[key]; e != nil {
		if c.head.next != e {
			c.unlink(e)
			c.pushFront(e)
		}
		c.mu.Unlock()
		<-e.ready
		return e.tab
	}
	e := &cacheEntry{key: key, ready: make(chan struct{})}
	c.m[key] = e
	c.pushFront(e)
	c.mu.Unlock()

	tab := load()
	c.mu.Lock()
	e.tab, e.size = tab, tab.Bytes()+len(key)
	close(e.ready)
	if c.m[key] == e { // not evicted while it was built
		c.bytes += e.size
		for c.bytes > c.max && c.head.prev != e {
			c.evict(c.head.prev)
		}
	}
	c.mu.Unlock()
	return tab
}

// forget drops key's entry when it holds tab (and not a table built
// since), so that the next get builds it again.
func (c *tableCache) forget(key string, tab *Table) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[key]; e != nil && e.tab == tab {
		c.unlink(e)
		delete(c.m, key)
		c.bytes -= e.size
	}
}

// evict drops a built entry; entries still being built are skipped (moved to the front).
func (c *tableCache) evict(e *cacheEntry) {
	c.unlink(e)
	select {
	case <-e.ready:
		delete(c.m, e.key)
		c.bytes -= e.size
	default:
		c.pushFront(e)
	}
}

// ready reports whether key's table is built and cached, without
// building it or touching its place in the LRU order.
func (c *tableCache) ready(key string) bool {
	c.mu.Lock()
	e := c.m[key]
	c.mu.Unlock()
	if e == nil {
		return false
	}
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// stats returns the number of tables held and their bytes.
func (c *tableCache) stats() (n, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.bytes
}
