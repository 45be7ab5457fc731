package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// childEnv marks the re-executed gprofile that waits, then execs the
// profiled command. Go cannot run code between fork and exec, so
// `gprofile -- CMD` starts itself in this mode: the child blocks on a pipe
// until the sampler runs with the child's pid as a target, then execs CMD
// with the same pid. Samples of the child before exec cannot occur (it is
// blocked), and its children are followed by the fork tracepoint.
const childEnv = "GPROFILE_EXEC_CHILD"

// child is a command started by gprofile, stopped before its exec.
type child struct {
	cmd     *exec.Cmd
	release *os.File      // writing a byte lets the child exec
	done    chan struct{} // closed when the command has exited
	waitErr error         // cmd.Wait's result, once done is closed
	started bool          // the command was let go to exec
	watched bool          // a goroutine waits for the command
}

// watch waits for the command in the background and calls onExit when it
// has exited.
func (c *child) watch(onExit func()) {
	c.watched = true
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.done)
		onExit()
	}()
}

// errNotFound is a command that does not exist: exit status 127, as the
// shell.
type errNotFound struct{ name string }

func (e *errNotFound) Error() string { return e.name + ": command not found" }

// startChild starts argv (stdin, stdout, stderr are gprofile's) stopped
// before exec. It fails with errNotFound when argv[0] is not found.
func startChild(argv []string) (*child, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, &errNotFound{argv[0]}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find gprofile's own binary: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self, append([]string{path}, argv...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r} // fd 3
	if err := startCommand(cmd); err != nil {
		w.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return &child{cmd: cmd, release: w, done: make(chan struct{})}, nil
}

// start lets the child exec its command.
func (c *child) start() error {
	_, err := c.release.Write([]byte{1})
	c.release.Close()
	c.started = err == nil
	return err
}

// exited reports whether the command has exited (it is watched).
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// wait waits for the command to exit and returns cmd.Wait's error.
func (c *child) wait() error {
	<-c.done
	return c.waitErr
}

// kill ends a child that never got to exec (gprofile failed first): the
// closed pipe makes it exit without running anything. A started command
// is left alone.
func (c *child) kill() {
	c.release.Close()
	switch {
	case c.started:
	case c.watched:
		<-c.done
	default:
		c.cmd.Wait()
	}
}

// exitCode maps the command's end to gprofile's exit status: its own
// status, or 128+signal when a signal killed it (as the shell reports).
func exitCode(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// runChildMode is main for the re-executed child: args are the resolved
// path, then the command's argv. It waits for gprofile's byte on fd 3 and
// execs; if gprofile goes away first it exits 1 without running anything.
func runChildMode(args []string) {
	os.Unsetenv(childEnv)
	if len(args) < 2 {
		os.Exit(1)
	}
	gate := os.NewFile(3, "gprofile-gate")
	var b [1]byte
	if _, err := io.ReadFull(gate, b[:]); err != nil {
		os.Exit(1)
	}
	gate.Close()
	err := syscall.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "gprofile: exec %s: %v\n", strings.Join(args[1:], " "), err)
	os.Exit(126)
}
