package main

import (
	"bufio"
	"fmt"
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

// formatOf picks the format: --format, else -E, else the -o extension
// (.folded, .txt, .json/.jsonl, .html; anything else is pprof).
func formatOf(flagValue string, folded bool, path string) (string, error) {
	if flagValue != "" {
		if !slices.Contains(formats, flagValue) {
			return "", fmt.Errorf("unknown --format %q (one of %s)", flagValue, strings.Join(formats, ", "))
		}
		return flagValue, nil
	}
	if folded {
		return formatFolded, nil
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".folded":
		return formatFolded, nil
	case ".txt":
		return formatText, nil
	case ".json", ".jsonl":
		return formatJSON, nil
	case ".html", ".htm":
		return formatHTML, nil
	}
	return formatPprof, nil
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
