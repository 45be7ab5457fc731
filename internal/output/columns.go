package output

import "fmt"

// ValueType names one value column of an Aggregator, as a pprof sample
// type does.
type ValueType struct {
	// Type is what the column measures: "samples", "cpu", "offcpu",
	// "wall", or a probe's name.
	Type string
	// Unit is its unit: "count", "nanoseconds".
	Unit string
}

// Column is the index of a value column of an Aggregator. Every
// Aggregator has ColumnCount and ColumnWeight; AddColumn adds more after
// them. BuildPprof writes every column as a sample type, in column order.
type Column int

const (
	// ColumnCount is the number of samples ("samples"/"count"):
	// AddStack adds 1 to it.
	ColumnCount Column = 0
	// ColumnWeight is the samples' weight, typed by Meta.ValueType
	// ("cpu"/"nanoseconds" for cpu-clock): AddStack adds the period.
	ColumnWeight Column = 1
)

// numFixed is the number of columns every Aggregator has.
const numFixed = 2

// AddColumn adds a value column of type vt after the others and returns
// it; samples add to it through AddValues (or Record.Values). Columns
// must be added before the first sample: AddColumn returns an error
// after that, or when vt has an empty Type or Unit or the Type of a
// column added before.
func (a *Aggregator) AddColumn(vt ValueType) (Column, error) {
	if vt.Type == "" || vt.Unit == "" {
		return 0, fmt.Errorf("add value column %q/%q: empty type or unit", vt.Type, vt.Unit)
	}
	if a.adds != 0 {
		return 0, fmt.Errorf("add value column %s/%s: samples were added already", vt.Type, vt.Unit)
	}
	for _, c := range a.extra {
		if c.Type == vt.Type {
			return 0, fmt.Errorf("add value column %s/%s: a column %s exists", vt.Type, vt.Unit, vt.Type)
		}
	}
	a.extra = append(a.extra, vt)
	return Column(numFixed + len(a.extra) - 1), nil
}

// Columns returns the types of the columns AddColumn added, from column
// 2 on (ColumnCount and ColumnWeight are not in it). The caller must
// not change the slice.
func (a *Aggregator) Columns() []ValueType { return a.extra }

// NumColumns returns the number of value columns: 2 and those AddColumn
// added.
func (a *Aggregator) NumColumns() int { return numFixed + len(a.extra) }

// SetDisplayColumn chooses the column that WriteFolded, WriteFlameHTML
// and WriteTop weigh stacks by: ColumnCount (sample counts) unless set.
// A column the Aggregator does not have is an error.
func (a *Aggregator) SetDisplayColumn(c Column) error {
	if c < 0 || int(c) >= a.NumColumns() {
		return fmt.Errorf("display column %d: the aggregate has %d columns", c, a.NumColumns())
	}
	a.display = c
	return nil
}

// ColumnTotal returns the sum of column c over every sample added; 0 for
// a column the Aggregator does not have.
func (a *Aggregator) ColumnTotal(c Column) int64 {
	switch {
	case c == ColumnCount:
		return a.count
	case c == ColumnWeight:
		return a.nanos
	case c < 0 || int(c) >= a.NumColumns():
		return 0
	}
	return a.extraTotal[int(c)-numFixed]
}

// AddValues adds one entry's worth of values with key and the stack id
// (InternStack of this Aggregator): vals[c] to column c, for every
// column (len(vals) is NumColumns(); missing values count as 0, values
// beyond the last column are ignored). AddStack(key, id, w) is
// AddValues(key, id, []int64{1, w}). Adding to an existing entry
// allocates nothing.
func (a *Aggregator) AddValues(key SampleKey, id StackID, vals []int64) {
	var count, weight int64
	if len(vals) > int(ColumnCount) {
		count = vals[ColumnCount]
	}
	if len(vals) > int(ColumnWeight) {
		weight = vals[ColumnWeight]
	}
	i := a.add(key, id, count, weight)
	m := len(a.extra)
	if m == 0 {
		return
	}
	if a.extraTotal == nil {
		a.extraTotal = make([]int64, m)
	}
	for a.more.len() < (i+1)*m {
		a.more.append(0)
	}
	for j := range m {
		if numFixed+j < len(vals) {
			v := vals[numFixed+j]
			*a.more.at(i*m + j) += v
			a.extraTotal[j] += v
		}
	}
}

// value returns column c of the i-th record r (in the order of addition,
// as eachRecord gives them).
func (a *Aggregator) value(r *record, i int, c Column) int64 {
	switch c {
	case ColumnCount:
		return r.count
	case ColumnWeight:
		return r.nanos
	}
	return a.extraOf(i, int(c)-numFixed)
}

// displayUnit names the display column's values for a total: "samples",
// "weight" (ColumnWeight, whose type the Meta names), or the added
// column's type and unit.
func (a *Aggregator) displayUnit() string {
	switch a.display {
	case ColumnCount:
		return "samples"
	case ColumnWeight:
		return "weight"
	}
	c := a.extra[int(a.display)-numFixed]
	return c.Type + " " + c.Unit
}

// Empty returns a new Aggregator with a's columns and display column and
// no samples: the next interval of a continuous run.
func (a *Aggregator) Empty() *Aggregator {
	b := NewAggregator()
	b.extra = append([]ValueType(nil), a.extra...)
	b.display = a.display
	return b
}
