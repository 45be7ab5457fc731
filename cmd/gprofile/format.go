package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gprofile/gprofile/internal/output"
	"github.com/gprofile/gprofile/internal/recorder"
)

// The output formats, named as --format takes them.
const (
	formatPprof  = "pprof"
	formatFolded = "folded"
	formatText   = "text"
	formatJSON   = "json"
	formatHTML   = "html"
)

var formats = []string{formatPprof, formatFolded, formatText, formatJSON, formatHTML}

// extFormats maps the -o extensions gprofile knows to the formats they
// name; the first is the one an extension picks, the others may be asked
// for with -E or --format (folded stacks are text too).
var extFormats = map[string][]string{
	".pb.gz": {formatPprof}, ".pb": {formatPprof}, ".pprof": {formatPprof}, ".prof": {formatPprof}, ".gz": {formatPprof},
	".folded": {formatFolded},
	".txt":    {formatText, formatFolded}, ".text": {formatText},
	".json": {formatJSON}, ".jsonl": {formatJSON},
	".html": {formatHTML}, ".htm": {formatHTML},
}

// outputExt returns path's extension as extFormats knows it (".pb.gz"
// whole), lower-cased.
func outputExt(path string) string {
	base := strings.ToLower(filepath.Base(path))
	if strings.HasSuffix(base, ".pb.gz") {
		return ".pb.gz"
	}
	return filepath.Ext(base)
}

// formatOf picks the format: --format, else -E, else the -o extension
// (.pb.gz, .pb, .pprof, .prof, .gz or none: pprof; .folded; .txt, .text; .json,
// .jsonl; .html, .htm). An extension it does not know, or one that names
// another format than --format or -E asked for, is an error; so is
// pprof (gzip) to a terminal. Targets that are not regular files (-, a
// FIFO, /dev/null) have no extension to check.
func formatOf(flagValue string, folded bool, path string) (string, error) {
	if flagValue != "" && !slices.Contains(formats, flagValue) {
		return "", fmt.Errorf("unknown --format %q (one of %s)", flagValue, strings.Join(formats, ", "))
	}
	asked := flagValue
	if asked == "" && folded {
		asked = formatFolded
	}
	ext := outputExt(path)
	if path == "-" || ext == "" || !regularTarget(path) {
		if asked == "" {
			asked = formatPprof
		}
		return asked, nil
	}
	known, ok := extFormats[ext]
	switch {
	case !ok:
		return "", fmt.Errorf("-o %s: gprofile writes no %s files; name it .pb.gz (pprof), .folded, .txt, .json or .html (flame graph), or give --format", path, ext)
	case asked == "":
		return known[0], nil
	case !slices.Contains(known, asked):
		how := "--format " + asked
		if flagValue == "" {
			how = "-E"
		}
		return "", fmt.Errorf("%s writes %s, but -o %s names a %s file: change the extension, or drop %s", how, asked, path, known[0], how)
	}
	return asked, nil
}

// regularTarget reports whether path is, or would be created as, a
// regular file (not a FIFO, device or terminal that exists there).
func regularTarget(path string) bool {
	fi, err := os.Stat(path)
	return err != nil || fi.Mode().IsRegular()
}

// defaultOutput is the file each format goes to without -o, when it does
// not go to stdout ("" is pprof, the default format).
var defaultOutput = map[string]string{
	"": "gprofile.pb.gz", formatPprof: "gprofile.pb.gz", formatHTML: "gprofile.html",
	formatFolded: "gprofile.folded", formatText: "gprofile.txt", formatJSON: "gprofile.json",
}

// stdoutIsTerminal reports whether gprofile's stdout is a terminal (a
// variable for tests).
var stdoutIsTerminal = func() bool { return isTerminal(os.Stdout) }

// pickOutput settles -o and the format: with -- CMD, whose own output
// goes to stdout, a profile on stdout would mix with it, so the formats
// that default to stdout go to gprofile.<ext> instead and an explicit
// -o - is refused; pprof (gzip) is never written to a terminal.
func (o *options) pickOutput(formatFlag string, explicit bool) error {
	want := formatFlag
	if want == "" && o.folded {
		want = formatFolded
	}
	streams := want == formatFolded || want == formatText || want == formatJSON
	switch {
	case explicit && o.output == "-" && o.command != nil:
		return errors.New("-o -: with -- CMD the command writes to stdout too; write the profile to a file (-o FILE)")
	case explicit:
	case streams && o.command == nil:
		o.output = "-"
	default:
		o.output = defaultOutput[want]
	}
	var err error
	if o.format, err = formatOf(formatFlag, o.folded, o.output); err != nil {
		return err
	}
	if o.output == "-" && o.format == formatPprof && stdoutIsTerminal() {
		return errors.New("-o -: not writing gzip-compressed pprof to a terminal; redirect it (> FILE.pb.gz) or give -o FILE")
	}
	return nil
}

// newStreamer returns the per-sample writer of format on bw, or nil for
// the aggregated formats.
func newStreamer(format string, bw *bufio.Writer) recorder.Sink {
	switch format {
	case formatText:
		return output.NewTextWriter(bw)
	case formatJSON:
		return output.NewJSONWriter(bw)
	}
	return nil
}

// parseLabels checks --labels: a comma-separated subset of pid, tid,
// comm, cpu and cgroup.
func parseLabels(s string) ([]string, error) {
	if s == "" {
		return []string{}, nil
	}
	labels := strings.Split(s, ",")
	for _, l := range labels {
		switch l {
		case output.LabelPID, output.LabelTID, output.LabelComm, output.LabelCPU, output.LabelCgroup:
		default:
			return nil, fmt.Errorf("unknown label %q in --labels (use pid, tid, comm, cpu, cgroup)", l)
		}
	}
	return labels, nil
}
