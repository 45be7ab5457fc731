package push

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprofile/gprofile/internal/push/pushtest"
)

// fastBackoff makes retries quick; the test servers decide how many fail.
var fastBackoff = QueueOptions{MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}

func openFake(t *testing.T, srv *httptest.Server, path string) Backend {
	t.Helper()
	b, err := Open("pyroscope://"+strings.TrimPrefix(srv.URL, "http://")+path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestQueueBackoff: the server fails the first 3 requests; the queue
// retries until it accepts, and every profile arrives once, in order.
func TestQueueBackoff(t *testing.T) {
	for _, path := range []string{"", "/ingest"} {
		fake := &pushtest.Pyroscope{FailN: 3, FailCode: http.StatusServiceUnavailable}
		srv := httptest.NewServer(fake)
		var mu sync.Mutex
		var logs []string
		o := fastBackoff
		o.Logf = func(f string, a ...any) { mu.Lock(); logs = append(logs, f); mu.Unlock() }
		q := NewQueue(openFake(t, srv, path), o)
		for _, fn := range []string{"one", "two"} {
			q.Add(testProfile(t, fn, map[string]string{LabelServiceName: "s"}))
		}
		st := q.Close(context.Background())
		srv.Close()
		got, err := fake.Received()
		if err != nil || len(got) != 2 || got[0].Profile.Function[0].Name != "one" || got[1].Profile.Function[0].Name != "two" {
			t.Fatalf("%s: received %d profiles (errors %v), want one then two", path, len(got), err)
		}
		if st.Sent != 2 || st.Errors != 3 || st.Dropped != 0 || st.Queued != 0 || fake.Requests() != 5 {
			t.Errorf("%s: stats %+v after %d requests; want 2 sent, 3 errors, none dropped or queued, 5 requests", path, st, fake.Requests())
		}
		if len(logs) != 2 || !strings.Contains(logs[0], "retrying") || !strings.Contains(logs[1], "delivered again") {
			t.Errorf("%s: log %q, want the first failure and the recovery", path, logs)
		}
	}
}

// TestQueuePermanent: a refusal that retrying cannot fix drops the
// profile at once and counts it; the next one goes through.
func TestQueuePermanent(t *testing.T) {
	fake := &pushtest.Pyroscope{FailN: 1, FailCode: http.StatusUnauthorized}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	q := NewQueue(openFake(t, srv, ""), fastBackoff)
	q.Add(testProfile(t, "refused", map[string]string{LabelServiceName: "s"}))
	q.Add(testProfile(t, "accepted", map[string]string{LabelServiceName: "s"}))
	st := q.Close(context.Background())
	got, _ := fake.Received()
	if st.Sent != 1 || st.Dropped != 1 || st.Errors != 1 || len(got) != 1 || got[0].Profile.Function[0].Name != "accepted" {
		t.Errorf("stats %+v, received %d; want 1 sent (accepted), 1 dropped, 1 error", st, len(got))
	}
	if n, _ := q.TakeDropped(); n != 1 {
		t.Errorf("TakeDropped = %d, want 1", n)
	}
}

// TestQueueOverflow: with the server down, the queue keeps at most
// MaxBytes of profiles, drops the oldest and counts them; TakeDropped
// reports each drop once; Close gives up on the rest and counts them.
func TestQueueOverflow(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	b := openFake(t, srv, "")
	srv.Close() // down: connections are refused
	p := testProfile(t, "f", map[string]string{LabelServiceName: "s"})
	o := fastBackoff
	o.MaxBytes = 2 * len(p.Data)
	q := NewQueue(b, o)
	const n = 10
	for range n {
		q.Add(p)
		if st := q.Stats(); st.QueuedBytes > o.MaxBytes+len(p.Data) {
			t.Fatalf("queue holds %d bytes, more than %d and the one being sent", st.QueuedBytes, o.MaxBytes)
		}
	}
	// At most 2 wait and 1 is being sent: the other 7 or more were dropped.
	dropped, bytes := q.TakeDropped()
	if dropped < n-3 || bytes != dropped*uint64(len(p.Data)) {
		t.Errorf("TakeDropped = %d profiles, %d bytes; want at least %d of %d bytes each", dropped, bytes, n-3, len(p.Data))
	}
	if again, _ := q.TakeDropped(); again != 0 {
		t.Errorf("TakeDropped reported %d again", again)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	st := q.Close(ctx)
	if st.Sent != 0 || st.Dropped != n || st.Queued != 0 || st.DroppedBytes != n*uint64(len(p.Data)) {
		t.Errorf("after Close: %+v; want all %d dropped, none sent or queued", st, n)
	}
	if rest, _ := q.TakeDropped(); rest != n-dropped {
		t.Errorf("TakeDropped after Close = %d, want %d", rest, n-dropped)
	}
}
