package output

import (
	"cmp"
	"slices"

	"github.com/google/pprof/profile"
)

// Part is one group of a profile that SplitPprof cut.
type Part struct {
	// Key is the group's key.
	Key string
	// Profile holds the group's samples.
	Profile *profile.Profile
}

// SplitPprof groups the samples of p by key (called once per sample, in
// order) and returns one profile per group, sorted by key: each has p's
// header (sample types, period, time, duration, comments), the group's
// samples in p's order, and only the mappings, locations and functions
// they use, the group's main binary first (as BuildPprof orders them:
// the first executable that is not a shared library or a pseudo-file).
// A group of one key is p itself.
//
// The parts share their mappings, locations and functions with p and
// with each other, IDs included: the IDs of a part need not be dense,
// which the pprof format allows. Nothing is copied, so a part costs
// little more than its samples' stacks. Read the parts and encode them
// one at a time (profile.Profile.Write fills unexported fields of the
// shared objects while it encodes); do not edit them.
func SplitPprof(p *profile.Profile, key func(*profile.Sample) string) []Part {
	idx := map[string]int{}
	var groups [][]*profile.Sample
	var keys []string
	for _, s := range p.Sample {
		k := key(s)
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			groups = append(groups, nil)
			keys = append(keys, k)
		}
		groups[i] = append(groups[i], s)
	}
	if len(groups) <= 1 {
		if len(groups) == 0 {
			return nil
		}
		return []Part{{Key: keys[0], Profile: p}}
	}
	parts := make([]Part, len(groups))
	sp := splitter{locs: make(map[*profile.Location]int, len(p.Location)), funcs: make(map[*profile.Function]int, len(p.Function)), maps: make(map[*profile.Mapping]int, len(p.Mapping))}
	for i, samples := range groups {
		parts[i] = Part{Key: keys[i], Profile: sp.part(p, samples, i+1)}
	}
	slices.SortFunc(parts, func(a, b Part) int { return cmp.Compare(a.Key, b.Key) })
	return parts
}

// splitter marks what each part uses: a map's value is the number of
// the last part that took the object, so one set of maps serves all
// parts in turn.
type splitter struct {
	locs  map[*profile.Location]int
	funcs map[*profile.Function]int
	maps  map[*profile.Mapping]int
}

// part makes the profile of samples, part number n (from 1).
func (sp *splitter) part(p *profile.Profile, samples []*profile.Sample, n int) *profile.Profile {
	q := &profile.Profile{
		SampleType: p.SampleType, DefaultSampleType: p.DefaultSampleType, Sample: samples,
		Comments: p.Comments, DropFrames: p.DropFrames, KeepFrames: p.KeepFrames,
		TimeNanos: p.TimeNanos, DurationNanos: p.DurationNanos, PeriodType: p.PeriodType, Period: p.Period,
	}
	for _, s := range samples {
		for _, l := range s.Location {
			if sp.locs[l] == n {
				continue
			}
			sp.locs[l] = n
			q.Location = append(q.Location, l)
			if l.Mapping != nil {
				sp.maps[l.Mapping] = n
			}
			for _, ln := range l.Line {
				if ln.Function != nil && sp.funcs[ln.Function] != n {
					sp.funcs[ln.Function] = n
					q.Function = append(q.Function, ln.Function)
				}
			}
		}
	}
	for _, m := range p.Mapping {
		if sp.maps[m] == n {
			q.Mapping = append(q.Mapping, m)
		}
	}
	if i := mainIndex(q.Mapping); i > 0 {
		main := q.Mapping[i]
		copy(q.Mapping[1:i+1], q.Mapping[:i])
		q.Mapping[0] = main
	}
	return q
}
