package push

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Delivery defaults (QueueOptions fields left zero).
const (
	// DefaultMaxQueueBytes caps the gzipped profiles waiting to be sent:
	// a backend that is down costs at most this much memory.
	DefaultMaxQueueBytes = 16 << 20
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait between two
	// attempts after a failure; it doubles from the one to the other.
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 2 * time.Minute
	// DefaultSendTimeout bounds one attempt.
	DefaultSendTimeout = 30 * time.Second
)

// QueueOptions tunes a Queue; zero fields take the defaults above.
type QueueOptions struct {
	// MaxBytes caps the bytes (Profile.Data) of the profiles waiting,
	// besides the one being sent; past it the oldest are dropped.
	MaxBytes int
	// MinBackoff and MaxBackoff bound the wait after a failed attempt:
	// it starts at MinBackoff and doubles up to MaxBackoff, each wait a
	// random time between half of it and all of it (jitter, so that a
	// fleet does not retry in step).
	MinBackoff, MaxBackoff time.Duration
	// SendTimeout bounds one attempt (Backend.Send).
	SendTimeout time.Duration
	// Logf, when not nil, gets one line per event worth a log: the first
	// failure of a run of them, the recovery, profiles dropped.
	Logf func(format string, args ...any)
}

// Stats are a Queue's counters since it was made.
type Stats struct {
	// Sent and SentBytes count the profiles the backend accepted.
	Sent, SentBytes uint64
	// Errors counts failed attempts (each retry counts).
	Errors uint64
	// Dropped and DroppedBytes count the profiles given up on: pushed
	// out of a full queue, refused for good (ErrPermanent), larger than
	// the queue, or still waiting when the queue was closed.
	Dropped, DroppedBytes uint64
	// Queued and QueuedBytes are the profiles waiting now, the one being
	// sent included.
	Queued      int
	QueuedBytes int
}

// Queue sends profiles to a Backend in order, one at a time, from a
// goroutine of its own: Add never waits for the network. It holds at
// most QueueOptions.MaxBytes of profiles (and the one being sent),
// dropping the oldest when full; a failed attempt is retried with
// exponential backoff and jitter unless it is permanent. Its methods are
// safe for concurrent use.
type Queue struct {
	b    Backend
	o    QueueOptions
	mu   sync.Mutex
	q    []*Profile // waiting, oldest first
	qb   int        // bytes in q
	cur  *Profile   // being sent
	wake chan struct{}
	done chan struct{} // closed when the sending goroutine returns
	stop context.CancelFunc

	sent, sentBytes, errs, dropped, droppedBytes atomic.Uint64
	unreported, unreportedBytes                  atomic.Uint64 // dropped since TakeDropped
}

// NewQueue starts a Queue that sends to b until Close.
func NewQueue(b Backend, o QueueOptions) *Queue {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxQueueBytes
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = DefaultSendTimeout
	}
	ctx, stop := context.WithCancel(context.Background())
	q := &Queue{b: b, o: o, wake: make(chan struct{}, 1), done: make(chan struct{}), stop: stop}
	go q.run(ctx)
	return q
}

// Add queues p to be sent, dropping the oldest profiles waiting while
// the queue would hold more than MaxBytes (p itself when it alone is
// larger).
func (q *Queue) Add(p *Profile) {
	q.mu.Lock()
	var n, nb uint64
	if len(p.Data) > q.o.MaxBytes {
		n, nb = 1, uint64(len(p.Data))
	} else {
		q.q = append(q.q, p)
		q.qb += len(p.Data)
		for q.qb > q.o.MaxBytes {
			n, nb = n+1, nb+uint64(len(q.q[0].Data))
			q.qb -= len(q.q[0].Data)
			q.q[0] = nil
			q.q = q.q[1:]
		}
	}
	q.mu.Unlock()
	if n > 0 {
		q.drop(n, nb, "the queue is full (the backend is down or slow)")
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// drop counts n profiles of nb bytes as dropped and logs why.
func (q *Queue) drop(n, nb uint64, why string) {
	q.dropped.Add(n)
	q.droppedBytes.Add(nb)
	q.unreported.Add(n)
	q.unreportedBytes.Add(nb)
	q.logf("push to %s: dropped %d profile(s), %d bytes: %s", q.b.Name(), n, nb, why)
}

func (q *Queue) logf(format string, args ...any) {
	if q.o.Logf != nil {
		q.o.Logf(format, args...)
	}
}

// TakeDropped returns how many profiles, and bytes, were dropped since
// its last call: for the comments of the next profile.
func (q *Queue) TakeDropped() (profiles, bytes uint64) {
	return q.unreported.Swap(0), q.unreportedBytes.Swap(0)
}

// Stats returns the counters now.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	s := Stats{Queued: len(q.q), QueuedBytes: q.qb}
	if q.cur != nil {
		s.Queued++
		s.QueuedBytes += len(q.cur.Data)
	}
	q.mu.Unlock()
	s.Sent, s.SentBytes, s.Errors = q.sent.Load(), q.sentBytes.Load(), q.errs.Load()
	s.Dropped, s.DroppedBytes = q.dropped.Load(), q.droppedBytes.Load()
	return s
}

// next takes the oldest waiting profile as the one being sent, or
// returns nil.
func (q *Queue) next() *Profile {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cur = nil
	if len(q.q) == 0 {
		return nil
	}
	q.cur = q.q[0]
	q.q[0] = nil
	q.q = q.q[1:]
	q.qb -= len(q.cur.Data)
	return q.cur
}

// run sends until ctx is done.
func (q *Queue) run(ctx context.Context) {
	defer close(q.done)
	for {
		p := q.next()
		if p == nil {
			select {
			case <-q.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if !q.deliver(ctx, p) {
			return
		}
	}
}

// deliver sends p, retrying with backoff, until it is sent, refused for
// good (dropped) or ctx is done (false: p stays current, for Close to
// count).
func (q *Queue) deliver(ctx context.Context, p *Profile) bool {
	wait := q.o.MinBackoff
	for failures := 0; ; failures++ {
		actx, cancel := context.WithTimeout(ctx, q.o.SendTimeout)
		err := q.b.Send(actx, p)
		cancel()
		switch {
		case err == nil:
			q.sent.Add(1)
			q.sentBytes.Add(uint64(len(p.Data)))
			if failures > 0 {
				q.logf("push to %s: delivered again after %d failed attempt(s)", q.b.Name(), failures)
			}
			return true
		case ctx.Err() != nil:
			return false
		}
		q.errs.Add(1)
		if errors.Is(err, ErrPermanent) {
			q.drop(1, uint64(len(p.Data)), err.Error())
			return true
		}
		if failures == 0 {
			q.logf("push to %s: %v (retrying with backoff up to %v)", q.b.Name(), err, q.o.MaxBackoff)
		}
		d := wait/2 + rand.N(wait/2+1)
		wait = min(2*wait, q.o.MaxBackoff)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return false
		}
	}
}

// Close stops sending: it waits until ctx is done for the queue to
// empty (a last attempt for each profile still waiting), then gives up
// and counts what was not sent as dropped. It returns the Stats at the
// end. Close is called once.
func (q *Queue) Close(ctx context.Context) Stats {
	for {
		s := q.Stats()
		if s.Queued == 0 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	q.stop()
	<-q.done
	q.mu.Lock()
	left := q.q
	if q.cur != nil {
		left = append(left, q.cur)
	}
	q.q, q.qb, q.cur = nil, 0, nil
	q.mu.Unlock()
	var nb uint64
	for _, p := range left {
		nb += uint64(len(p.Data))
	}
	if len(left) > 0 {
		q.drop(uint64(len(left)), nb, "still waiting when gprofile stopped")
	}
	return q.Stats()
}
