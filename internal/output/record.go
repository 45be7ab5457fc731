package output

import "github.com/gprofile/gprofile/internal/symbolize"

// Record is one sample on its way from a recorder to its sinks: the
// Aggregator counts it by Key and Stack (Aggregator.Add), TextWriter and
// JSONWriter write its Meta and Frames (their Add). A sink must not keep
// a Record or its Frames past the call.
type Record struct {
	// Meta is when and where the sample was taken: all of its process,
	// thread, CPU and comm.
	Meta SampleMeta
	// Key is what the aggregate tells the sample apart by: Meta's fields
	// that the run's labels ask for, the others zero.
	Key SampleKey
	// Stack is the sample's stack in the run's Aggregator (InternStack).
	Stack StackID
	// Frames are the stack's frames, leaf first, with the addresses as
	// sampled in this process; nil when no per-sample writer needs them.
	Frames *symbolize.Stack
	// Weight is the sample period: ns for cpu-clock, events for the
	// other events.
	Weight int64
	// Values, when not nil, are the sample's values in every column of
	// the Aggregator, in column order (Aggregator.AddValues):
	// ColumnCount, ColumnWeight, then the columns AddColumn added; Weight
	// is then ignored. nil counts 1 sample of Weight, as AddStack does.
	Values []int64
}

// Add counts r by its Key and Stack (AddStack, or AddValues when
// r.Values is set). It never fails: the error is there to make an
// Aggregator a sink like the streaming writers.
func (a *Aggregator) Add(r *Record) error {
	if r.Values != nil {
		a.AddValues(r.Key, r.Stack, r.Values)
		return nil
	}
	a.AddStack(r.Key, r.Stack, r.Weight)
	return nil
}

// Add writes r's Meta and Frames (WriteSample).
func (tw *TextWriter) Add(r *Record) error { return tw.WriteSample(r.Meta, r.Frames) }

// Add writes r's Meta and Frames (WriteSample).
func (jw *JSONWriter) Add(r *Record) error { return jw.WriteSample(r.Meta, r.Frames) }
