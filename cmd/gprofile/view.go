package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/driver"
	"github.com/google/pprof/profile"
)

// errViewUsage marks the errors of runView that come from a bad command
// line (exit status 2).
var errViewUsage = errors.New("usage: gprofile view [--http ADDR] [--no-browser] FILE")

const viewUsageText = `gprofile view: show a pprof profile in pprof's web UI (flame graph, top,
graph, peek, source) without installing Go.

Usage:
  gprofile view [--http ADDR] [--no-browser] FILE

Examples:
  gprofile view gprofile.pb.gz                     serve on localhost:8080, open a browser
  gprofile view --http :9090 --no-browser app.pb.gz
  gprofile view --http 0.0.0.0:8080 app.pb.gz      reachable from other hosts

As with go tool pprof, an address without a host (:9090) listens on
localhost only. Ctrl-C stops the server.

Flags:
`

// viewOptions is the parsed command line of gprofile view.
type viewOptions struct {
	http      string // host:port
	noBrowser bool
	file      string
}

// runView runs "gprofile view ARGS": it serves pprof's web UI for the
// profile FILE until SIGINT or SIGTERM. It returns errHelp for -h, an
// error wrapping errViewUsage for a bad command line, and other errors
// (a missing or unreadable FILE, a FILE that is not a pprof profile, an
// address in use) as they come.
func runView(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveView(ctx, args, os.Stderr)
}

// serveView parses args, reads the profile and serves the web UI until ctx
// is done; messages (the URL, pprof's warnings) go to stderr.
func serveView(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseViewArgs(args, stderr)
	if err != nil {
		return err
	}
	p, err := readProfile(o.file)
	if err != nil {
		return err
	}
	pprofArgs := []string{"-http=" + o.http}
	if o.noBrowser {
		pprofArgs = append(pprofArgs, "-no_browser")
	}
	err = driver.PProf(&driver.Options{
		Flagset:    newPprofFlags(append(pprofArgs, o.file)),
		Fetch:      profileFetcher{file: o.file, p: p},
		UI:         viewUI{w: stderr},
		HTTPServer: viewServer(ctx),
	})
	if err != nil {
		return fmt.Errorf("serve %s: %w", o.file, err)
	}
	return nil
}

// parseViewArgs parses the command line; flags may come before or after
// FILE.
func parseViewArgs(args []string, stderr io.Writer) (*viewOptions, error) {
	o := &viewOptions{}
	fs := flag.NewFlagSet("gprofile view", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, viewUsageText)
		printFlags(stderr, fs)
	}
	fs.StringVar(&o.http, "http", "localhost:8080", "serve the web UI on `host:port`")
	fs.BoolVar(&o.noBrowser, "no-browser", false, "do not open a web browser")
	var files []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, fmt.Errorf("%v; %w", err, errViewUsage)
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	switch len(files) {
	case 0:
		return nil, fmt.Errorf("missing FILE; %w", errViewUsage)
	case 1:
		o.file = files[0]
	default:
		return nil, fmt.Errorf("one FILE at a time, got %q; %w", files, errViewUsage)
	}
	if _, _, err := net.SplitHostPort(o.http); err != nil {
		return nil, fmt.Errorf("bad --http address %q (want host:port or :port); %w", o.http, errViewUsage)
	}
	if !o.noBrowser && viewGetenv("DISPLAY") == "" && viewGetenv("WAYLAND_DISPLAY") == "" {
		// A browser started here would fail (Chromium as root prints a
		// sandbox error); pprof prints the URL to open elsewhere.
		o.noBrowser = true
		fmt.Fprintln(stderr, "gprofile view: no DISPLAY or WAYLAND_DISPLAY, so no browser: open the URL below (over ssh: ssh -L 8080:localhost:8080 HOST)")
	}
	return o, nil
}

// viewGetenv reads the environment for serveView (a variable for tests).
var viewGetenv = os.Getenv

// readProfile reads and parses a pprof profile (gzipped or not).
func readProfile(file string) (*profile.Profile, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("open profile: %w", err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s is not a pprof profile: %w", file, err)
	}
	return p, nil
}

// profileFetcher hands pprof the profile readProfile read, so that pprof
// neither reads the file again nor takes its name for a URL.
type profileFetcher struct {
	file string
	p    *profile.Profile
}

func (f profileFetcher) Fetch(src string, _, _ time.Duration) (*profile.Profile, string, error) {
	if src != f.file {
		return nil, "", fmt.Errorf("unexpected profile source %q", src)
	}
	return f.p, "", nil
}

// viewServer returns pprof's HTTPServer: it serves pprof's handlers under
// /ui/ (as go tool pprof -http does, so its URLs work) until ctx is done.
func viewServer(ctx context.Context) func(*driver.HTTPServerArgs) error {
	return func(args *driver.HTTPServerArgs) error {
		ln, err := net.Listen("tcp", args.Hostport)
		if err != nil {
			return err
		}
		ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := args.Handlers[r.URL.Path]
			if h == nil {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
		mux := http.NewServeMux()
		mux.Handle("/ui/", http.StripPrefix("/ui", ui))
		mux.Handle("/", http.RedirectHandler("/ui/", http.StatusTemporaryRedirect))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
		stopped := context.AfterFunc(ctx, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		})
		defer stopped()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

// viewUI is pprof's UI: messages go to w, and there is no interactive
// shell.
type viewUI struct{ w io.Writer }

func (ui viewUI) ReadLine(string) (string, error) { return "", io.EOF }

func (ui viewUI) Print(args ...any) { ui.println(args) }

func (ui viewUI) PrintErr(args ...any) { ui.println(args) }

func (ui viewUI) println(args []any) {
	fmt.Fprintln(ui.w, strings.TrimSuffix(fmt.Sprint(args...), "\n"))
}

func (viewUI) IsTerminal() bool                    { return false }
func (viewUI) WantBrowser() bool                   { return true }
func (viewUI) SetAutoComplete(func(string) string) {}

// pprofFlags is the command line pprof parses: a flag.FlagSet holding
// only the arguments serveView chose.
type pprofFlags struct {
	fs    *flag.FlagSet
	args  []string
	usage []string
}

func newPprofFlags(args []string) *pprofFlags {
	fs := flag.NewFlagSet("pprof", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &pprofFlags{fs: fs, args: args}
}

func (f *pprofFlags) Bool(name string, def bool, usage string) *bool {
	return f.fs.Bool(name, def, usage)
}

func (f *pprofFlags) Int(name string, def int, usage string) *int {
	return f.fs.Int(name, def, usage)
}

func (f *pprofFlags) Float64(name string, def float64, usage string) *float64 {
	return f.fs.Float64(name, def, usage)
}

func (f *pprofFlags) String(name, def, usage string) *string {
	return f.fs.String(name, def, usage)
}

func (f *pprofFlags) StringList(name, def, usage string) *[]*string {
	list := new([]*string)
	if def != "" {
		*list = append(*list, &def)
	}
	f.fs.Func(name, usage, func(s string) error {
		*list = append(*list, &s)
		return nil
	})
	return list
}

func (f *pprofFlags) ExtraUsage() string { return strings.Join(f.usage, "\n") }

func (f *pprofFlags) AddExtraUsage(eu string) { f.usage = append(f.usage, eu) }

// Parse parses the arguments serveView chose; they are always valid, but
// as pprof asks, a bad one calls usage and returns nil.
func (f *pprofFlags) Parse(usage func()) []string {
	if err := f.fs.Parse(f.args); err != nil || f.fs.NArg() == 0 {
		usage()
		return nil
	}
	return f.fs.Args()
}
