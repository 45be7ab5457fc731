package output

import (
	"github.com/gprofile/gprofile/internal/symbolize"
)

// Sample is the sum of all samples with the same SampleKey (process,
// thread, CPU and thread name, as far as the caller filled them in) and the
// same symbolized stack.
type Sample struct {
	// PID is the process ID (the kernel's tgid) the samples were taken in.
	PID uint32
	// TID is the thread ID; 0 when the caller did not key samples by thread
	// (a zero SampleKey.TID).
	TID uint32
	// CPU is the CPU the samples were taken on; 0 when the caller did not
	// key samples by CPU (a zero SampleKey.CPU).
	CPU uint32
	// Comm is the thread name (the kernel's comm, at most 15 bytes) at the
	// time of the samples; "" when unknown.
	Comm string
	// Cgroup is the cgroup v2 path of the task (e.g.
	// "/system.slice/ssh.service"); "" when not keyed by cgroup.
	Cgroup string
	// Stack is the symbolized stack, shared with every other Sample of the
	// same stack; nil stands for an empty stack.
	Stack *symbolize.Stack
	// Count is the number of samples.
	Count int64
	// Nanos is the CPU time the samples stand for, in nanoseconds: the sum
	// of their sample periods (ColumnWeight).
	Nanos int64
	// More holds the values of the columns AddColumn added, in column
	// order (More[0] is column 2); nil when there are none. Shared with
	// the Aggregator: the caller must not change it.
	More []int64
}

// SampleKey is what, besides the stack, tells samples apart in an
// Aggregator. The caller zeroes the fields it does not want to tell samples
// apart by (and does not want as pprof labels): a zero TID merges the
// threads of a process, a zero CPU merges the CPUs.
type SampleKey struct {
	PID, TID, CPU uint32
	Comm          string
	Cgroup        string
}

// recKey identifies one aggregated entry: a stack and a SampleKey with
// its strings interned (24 bytes).
type recKey struct {
	stack         StackID
	pid, tid, cpu uint32
	comm, cgroup  strID
}

// record is one aggregated entry (40 bytes).
type record struct {
	recKey
	count, nanos int64
}

// retireBatch is how many processes Retire collects before it sweeps
// their entries out of the index.
const retireBatch = 256

// Aggregator merges samples with the same SampleKey and stack into one
// Sample. The zero value is ready to use; an Aggregator is not safe for
// concurrent use.
//
// It holds every distinct stack once, as a sequence of location ids, and
// every location (the frames of one address: a binary and file offset,
// or a kernel address) once, with its names in a string table; an
// aggregated entry is a 40-byte record. Stacks come by content
// (InternStack), samples by stack id (AddStack, or Add of a Record).
// Entries of processes that will get no more
// samples (Retire) leave the hash index and stay only in the packed
// record slice, so that the memory a process costs after it exited is
// 40 bytes per distinct (key, stack) and the stacks and locations it
// added, which later processes of the same programs share.
type Aggregator struct {
	strs    strTable
	locs    locTable
	stacks  stackTable
	live    map[recKey]uint32 // index into recs; not retired
	recs    chunks[record]    // in order of first add
	retired map[uint32]bool   // pids to sweep out of live
	swept   int               // live entries deleted since live was made
	count   int64
	nanos   int64
	adds    uint64 // AddStack and AddValues calls

	extra      []ValueType   // the columns AddColumn added, from column 2
	more       chunks[int64] // record i's extra values: more[i*len(extra):][:len(extra)]
	extraTotal []int64       // the sums of the extra columns
	display    Column        // the column folded, flame and top weigh by

	hash       hasher             // of location and stack content keys
	scratch    []byte             // content key being built
	scratchIDs []uint32           // location ids of the stack being interned
	built      []*symbolize.Stack // stack id -> its frames, made by Samples

	sortedRecs []record // the records in the order of Samples (sorted)
	sortedMore []int64  // their extra values, len(extra) per record
	sortedAdds uint64   // adds when sortedRecs was made
}

// NewAggregator returns an empty Aggregator.
func NewAggregator() *Aggregator {
	return &Aggregator{live: make(map[recKey]uint32)}
}

// AddStack counts one sample with key and the stack id (from InternStack
// of this Aggregator) that stands for nanos nanoseconds of
// CPU time (its sample period): 1 in ColumnCount, nanos in ColumnWeight,
// nothing in the columns AddColumn added. Adding to an existing entry is a few map
// lookups and allocates nothing.
func (a *Aggregator) AddStack(key SampleKey, id StackID, nanos int64) {
	a.add(key, id, 1, nanos)
}

// EntryID names an aggregated entry (a SampleKey and stack) of an
// Aggregator: from AddStackEntry, for AddToEntry.
type EntryID uint32

// AddStackEntry is AddStack, and returns the entry the sample went to,
// which AddToEntry adds to directly for the life of the Aggregator (a
// retired entry too: Samples merges it as ever).
func (a *Aggregator) AddStackEntry(key SampleKey, id StackID, nanos int64) EntryID {
	return EntryID(a.add(key, id, 1, nanos))
}

// AddToEntry counts one sample of nanos nanoseconds in entry e (from
// AddStackEntry of this Aggregator), as AddStack with its key and stack
// would, without the lookups (BenchmarkHotPath).
func (a *Aggregator) AddToEntry(e EntryID, nanos int64) {
	a.adds++
	a.count++
	a.nanos += nanos
	r := a.recs.at(int(e))
	r.count++
	r.nanos += nanos
}

// add adds count and weight to the entry of key and stack id, making
// it if needed, and returns its index in recs.
func (a *Aggregator) add(key SampleKey, id StackID, count, weight int64) int {
	a.adds++
	a.count += count
	a.nanos += weight
	k := recKey{stack: id, pid: key.PID, tid: key.TID, cpu: key.CPU,
		comm: a.strs.id(key.Comm), cgroup: a.strs.id(key.Cgroup)}
	if i, ok := a.live[k]; ok {
		r := a.recs.at(int(i))
		r.count += count
		r.nanos += weight
		return int(i)
	}
	if a.live == nil {
		a.live = make(map[recKey]uint32)
	}
	i := a.recs.len()
	a.live[k] = uint32(i)
	a.recs.append(record{recKey: k, count: count, nanos: weight})
	return i
}

// Retire says that process pid will get no more samples (it exited): its
// entries leave the index, in batches, and stay in the result. Should a
// sample of pid come after all (a late one, or a new process with the
// same pid), it gets a new entry, which Samples merges with the old one.
func (a *Aggregator) Retire(pid uint32) {
	if a.retired == nil {
		a.retired = make(map[uint32]bool)
	}
	a.retired[pid] = true
	if len(a.retired) >= retireBatch {
		a.sweep()
	}
}

// sweep deletes the entries of the retired processes from the index, and
// makes the index anew once it deleted more entries than it holds (a Go
// map does not shrink).
func (a *Aggregator) sweep() {
	for k := range a.live {
		if a.retired[k.pid] {
			delete(a.live, k)
			a.swept++
		}
	}
	clear(a.retired)
	if a.swept > len(a.live) {
		live := make(map[recKey]uint32, len(a.live))
		for k, i := range a.live {
			live[k] = i
		}
		a.live, a.swept = live, 0
	}
}

// Len returns the number of aggregated entries: the length of the slice
// Samples returns, unless a retired process got samples again (Retire).
func (a *Aggregator) Len() int {
	return a.recs.len()
}

// Total returns the number of samples added and the CPU time they stand
// for, in nanoseconds (the sum of the nanos passed to AddStack): the
// totals of ColumnCount and ColumnWeight.
func (a *Aggregator) Total() (count, nanos int64) {
	return a.count, a.nanos
}

// chunkBits sets the size of the chunks of a chunks: 8192 elements.
const chunkBits = 13

// chunks is a slice that grows by fixed-size chunks: an Aggregator's
// tables only grow, and a slice that doubles would at times hold twice
// the memory it needs, and three times while it copies. Elements never
// move, so pointers to them stay valid. The zero value is empty.
type chunks[T any] struct {
	c [][]T // every chunk but the last is full
	n int
}

// len returns the number of elements.
func (s *chunks[T]) len() int { return s.n }

// at returns a pointer to element i (0 <= i < len).
func (s *chunks[T]) at(i int) *T {
	return &s.c[i>>chunkBits][i&(1<<chunkBits-1)]
}

// append adds v at the end.
func (s *chunks[T]) append(v T) {
	if s.n&(1<<chunkBits-1) == 0 {
		s.c = append(s.c, make([]T, 0, 1<<chunkBits))
	}
	last := &s.c[len(s.c)-1]
	*last = append(*last, v)
	s.n++
}

// flat returns the elements in one new slice.
func (s *chunks[T]) flat() []T {
	out := make([]T, 0, s.n)
	for _, c := range s.c {
		out = append(out, c...)
	}
	return out
}
