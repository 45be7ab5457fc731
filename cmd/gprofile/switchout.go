package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gprofile/gprofile/internal/output"
)

// stampLayout is the time stamp in the names of --switch-output files:
// the interval's start, UTC, to the millisecond; names sort by time.
const stampLayout = "20060102T150405.000Z"

// switchWriter writes one file per interval for --switch-output: -o's
// name with the interval's start stamped before its extension
// (gprofile.pb.gz: gprofile.20261125T064012.123Z.pb.gz), each written to
// a temporary file and renamed, so that a reader never sees half of one.
// With max > 0 it removes the oldest files of that pattern in the
// directory (earlier runs' too) past max.
type switchWriter struct {
	dir, base, ext string
	format         string
	max            int
	o              *options
	pattern        *regexp.Regexp
}

func newSwitchWriter(o *options) *switchWriter {
	dir, file := filepath.Split(o.output)
	ext := outputExt(file)
	base := file[:len(file)-len(ext)]
	return &switchWriter{dir: dir, base: base, ext: ext, format: o.format, max: o.cont.switchMax, o: o,
		pattern: regexp.MustCompile(`^` + regexp.QuoteMeta(base) + `\.\d{8}T\d{6}\.\d{3}Z` + regexp.QuoteMeta(ext) + `$`)}
}

// name returns the file of the interval that started at start.
func (w *switchWriter) name(start time.Time) string {
	return filepath.Join(w.dir, w.base+"."+start.UTC().Format(stampLayout)+w.ext)
}

// write writes one interval (its aggregate, or for pprof the profile
// built from it) and removes the files past max. It returns the file's
// name.
func (w *switchWriter) write(a *output.Aggregator, p *profile.Profile, start time.Time, samples uint64) (string, error) {
	name := w.name(start)
	tmp, err := os.CreateTemp(w.dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("--switch-output: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a failure; gone after the rename anyway
	bw := bufio.NewWriterSize(tmp, 1<<16)
	switch w.format {
	case formatFolded:
		err = output.WriteFoldedOptions(bw, a, output.FoldedOptions{PerPID: w.o.perPID, PerThread: w.o.perTID, FullNames: w.o.fullName})
	case formatHTML:
		err = output.WriteFlameHTML(bw, a, fmt.Sprintf("gprofile: %d samples from %s", samples, start.Format(time.RFC3339)))
	default:
		err = p.Write(bw)
	}
	if err == nil {
		err = bw.Flush()
	}
	chownToSudoUser(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		return "", fmt.Errorf("--switch-output %s: %w", name, err)
	}
	w.rotate()
	return name, nil
}

// rotate removes the oldest files of the pattern past max.
func (w *switchWriter) rotate() {
	if w.max <= 0 {
		return
	}
	dir := w.dir
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && w.pattern.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	slices.SortFunc(names, strings.Compare)
	for len(names) > w.max {
		os.Remove(filepath.Join(dir, names[0]))
		names = names[1:]
	}
}
