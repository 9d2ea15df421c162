package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/bae-go/bae-go/internal/lib/childenv"
)

// MaxLineLen caps one forwarded output line, in characters, before the
// "[name] " prefix: one chatty child cannot flood the launcher's log or a
// trigger's response with an unbounded line.
const MaxLineLen = 8192

// maxLineBytes bounds what is held of one line before its capped form is
// emitted (MaxLineLen characters of at most 4 bytes each).
const maxLineBytes = 4 * MaxLineLen

// waitDelay bounds how long Run waits, once the child has exited or been
// killed, for output still held open by a process it left behind.
const waitDelay = 10 * time.Second

// Stream says which of the child's outputs a line came from.
type Stream int

const (
	Stdout Stream = iota
	Stderr
)

// Line is one attributed, capped line of a child's output: "[name] text".
type Line struct {
	Stream Stream
	Text   string
}

// Spec is a child ready to spawn: every ${VAR} already resolved.
type Spec struct {
	Name    string
	Command string // PATH-resolved when not absolute
	Args    []string
	Env     map[string]string // with PATH, HOME, TMPDIR, TZ, LANG and LC_* of the launcher's (childenv)
	Dir     string            // "" inherits the launcher's working directory
}

// SpawnError says the child could not be started at all (a bad command, not
// executable): nothing ran.
type SpawnError struct{ Err error }

func (e *SpawnError) Error() string { return "spawn failed: " + e.Err.Error() }
func (e *SpawnError) Unwrap() error { return e.Err }

// Exit is how a child ended: ExitCode is nil when a signal killed it.
type Exit struct {
	ExitCode *int
}

// Run spawns spec, calls emit for every line of its stdout and stderr in
// arrival order (never concurrently), and returns once it has exited. When
// ctx ends the child's whole process group is killed; when the launcher
// itself dies the child is sent SIGKILL by the kernel (its process group's
// other members are not: see docs/launchers.md). A child that cannot be
// started is a *SpawnError, returned before any line.
func Run(ctx context.Context, spec Spec, emit func(Line)) (Exit, error) {
	return runWithStart(ctx, spec, emit, nil)
}

// runWithStart is Run that also calls started (when not nil) once the child
// is running.
func runWithStart(ctx context.Context, spec Spec, emit func(Line), started func(error)) (Exit, error) {
	cmd := exec.CommandContext(ctx, spec.Command, spec.Args...)
	cmd.Dir = spec.Dir
	// Only what a program needs from the launcher's environment, plus the
	// agent's own env: the launcher's token, database URL and the other
	// agents' secrets stay out of reach.
	cmd.Env = childenv.Build(os.Environ(), spec.Env)
	cmd.Stdin = nil
	// Its own process group, so a kill reaches whatever the child started;
	// and SIGKILL when the launcher dies without a chance to kill it
	// (SIGKILL, OOM): the parent-death signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	// Pipes of our own, not StdoutPipe: Wait then waits for the output to be
	// copied (bounded by WaitDelay, in case a grandchild keeps it open), so
	// no line written before the exit is lost.
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	cmd.Stdout, cmd.Stderr = outW, errW
	// The parent-death signal fires when the thread that forked the child
	// ends, not the process: the Go runtime ends a thread whose goroutine
	// exits while locked to it, and may hand this goroutine to another
	// thread. Locking it to its thread from the fork until the child has
	// been waited for keeps that thread alive exactly as long as the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return Exit{}, &SpawnError{Err: err}
	}
	if started != nil {
		started(nil)
	}
	var mu sync.Mutex
	prefix := "[" + spec.Name + "] "
	forward := func(r io.Reader, s Stream, wg *sync.WaitGroup) {
		defer wg.Done()
		readLines(r, func(text string) {
			mu.Lock()
			defer mu.Unlock()
			emit(Line{Stream: s, Text: prefix + text})
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go forward(outR, Stdout, &wg)
	go forward(errR, Stderr, &wg)
	werr := cmd.Wait()
	_ = outW.Close()
	_ = errW.Close()
	wg.Wait()
	var exitErr *exec.ExitError
	switch {
	case werr == nil:
		code := 0
		return Exit{ExitCode: &code}, nil
	case errors.As(werr, &exitErr):
		if st, ok := exitErr.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return Exit{}, nil
		}
		code := exitErr.ExitCode()
		return Exit{ExitCode: &code}, nil
	case errors.Is(werr, exec.ErrWaitDelay):
		code := cmd.ProcessState.ExitCode()
		if code < 0 {
			return Exit{}, nil
		}
		return Exit{ExitCode: &code}, nil
	}
	return Exit{}, fmt.Errorf("wait for %s: %w", spec.Name, werr)
}

// readLines calls line for every line of r (without its line ending), each
// capped at MaxLineLen characters with a trailing "…". The cap applies while
// reading: as soon as a line holds more than MaxLineLen characters its capped
// form is emitted, and the rest of it, up to its newline, is dropped. So a
// child writing a long line without a newline is seen at once, and no more
// than maxLineBytes and one read of a line are ever held.
func readLines(r io.Reader, line func(string)) {
	chunk := make([]byte, 32*1024)
	var buf []byte
	// counted is how much of buf is counted in runes (whole characters
	// only: a character split across reads is counted once complete).
	counted, runes := 0, 0
	dropping := false // the current line was emitted capped: skip to its end
	for {
		n, err := r.Read(chunk)
		rest := chunk[:n]
		for len(rest) > 0 {
			nl := bytes.IndexByte(rest, '\n')
			if nl >= 0 {
				if !dropping {
					buf = append(buf, rest[:nl]...)
					line(capLine(bytes.TrimSuffix(buf, []byte("\r")), false))
				}
				buf, counted, runes, dropping = buf[:0], 0, 0, false
				rest = rest[nl+1:]
				continue
			}
			if !dropping {
				buf = append(buf, rest...)
				counted, runes = countRunes(buf, counted, runes)
				if runes > MaxLineLen || len(buf) > maxLineBytes {
					line(capLine(buf, true))
					buf, counted, runes, dropping = buf[:0], 0, 0, true
				}
			}
			break
		}
		if err != nil {
			if len(buf) > 0 {
				line(capLine(bytes.TrimSuffix(buf, []byte("\r")), false))
			}
			return
		}
	}
}

// countRunes extends a count of the characters in b[:from] (runes of them)
// over b's complete characters, leaving out a trailing one not yet whole.
func countRunes(b []byte, from, runes int) (int, int) {
	for from < len(b) {
		if !utf8.FullRune(b[from:]) {
			break
		}
		_, size := utf8.DecodeRune(b[from:])
		from += size
		runes++
	}
	return from, runes
}

func capLine(b []byte, cut bool) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if utf8.RuneCountInString(s) > MaxLineLen {
		n := 0
		for i := range s {
			if n == MaxLineLen {
				s, cut = s[:i], true
				break
			}
			n++
		}
	}
	if cut {
		s += "…"
	}
	return s
}
