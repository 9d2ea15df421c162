package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// Prepared is an invocation ready to spawn, found by the launcher for a
// LaunchInput.
type Prepared struct {
	Spec Spec
	// Ctx, when set, ends the child too (a trigger whose caller went away).
	Ctx context.Context
	// Emit, when set, also receives every line (a trigger's response).
	Emit func(Line)
	// Started, when set, is called once the child is running or failed to
	// start (a trigger holds its response headers until then).
	Started func(error)
	// Done, when set, is called with how the child ended.
	Done func(Exit, error)
}

// Runner is the RunAgent activity: it spawns the child a LaunchInput names,
// forwards its lines to the launcher's own stdout and stderr, and heartbeats
// while the child runs.
type Runner struct {
	// Prepare finds and resolves the invocation for in. A *MissingEnvError
	// or a *SkipError skips the run.
	Prepare func(ctx context.Context, in LaunchInput) (Prepared, error)
	Stdout  io.Writer
	Stderr  io.Writer
	Logger  *slog.Logger
	// TailLines is how many of the last output lines the run's result keeps
	// (0: none, as for triggers, whose output belongs to their caller).
	TailLines int

	mu sync.Mutex // serialises writes to Stdout and Stderr across runs
}

// SkipError says a run is not spawned, with the reason.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return e.Reason }

// maxTailBytes bounds the output tail a result carries into Temporal.
const maxTailBytes = 4096

// RunAgent is registered as ActivityName.
func (r *Runner) RunAgent(ctx context.Context, in LaunchInput) (LaunchResult, error) {
	p, err := r.Prepare(ctx, in)
	if err != nil {
		var me *MissingEnvError
		var se *SkipError
		if errors.As(err, &me) || errors.As(err, &se) {
			r.Logger.Warn(fmt.Sprintf("agent %q skipped: %v", in.Agent, err), "agent", in.Agent)
			return LaunchResult{}, temporal.NewNonRetryableApplicationError(err.Error(), errTypeSkip, nil)
		}
		return LaunchResult{}, temporal.NewNonRetryableApplicationError(err.Error(), errTypeSkip, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if p.Ctx != nil {
		stop := context.AfterFunc(p.Ctx, cancel)
		defer stop()
	}
	if in.HeartbeatTimeout > 0 {
		go heartbeat(runCtx, in.HeartbeatTimeout/3)
	}
	var tail []string
	emit := func(l Line) {
		r.mu.Lock()
		w := r.Stdout
		if l.Stream == Stderr {
			w = r.Stderr
		}
		_, _ = io.WriteString(w, l.Text+"\n")
		r.mu.Unlock()
		if p.Emit != nil {
			p.Emit(l)
		}
		if r.TailLines > 0 {
			tail = appendTail(tail, l.Text, r.TailLines)
		}
	}
	started := time.Now()
	r.Logger.Info("agent started", "agent", in.Agent, "kind", in.Kind)
	exit, err := runNotifying(runCtx, p, emit)
	if p.Done != nil {
		p.Done(exit, err)
	}
	var spawnErr *SpawnError
	if errors.As(err, &spawnErr) {
		r.Logger.Error("agent could not be started", "agent", in.Agent, "err", err)
		return LaunchResult{}, temporal.NewNonRetryableApplicationError(err.Error(), errTypeSpawn, nil)
	}
	if err != nil {
		return LaunchResult{}, temporal.NewNonRetryableApplicationError(err.Error(), errTypeSpawn, nil)
	}
	res := LaunchResult{Outcome: OutcomeExited, ExitCode: exit.ExitCode, Started: started.UTC(), Ended: time.Now().UTC(), OutputTail: tail}
	switch {
	case exit.ExitCode == nil && ctx.Err() != nil:
		res.Detail = "killed: the launcher shut down while it ran"
	case exit.ExitCode == nil:
		res.Detail = "killed by a signal"
	}
	r.Logger.Info("agent exited", "agent", in.Agent, "exit_code", exitCodeAttr(exit), "duration", time.Since(started).Round(time.Millisecond).String())
	return res, nil
}

// runNotifying runs p.Spec and tells p.Started once the child runs or
// failed to start.
func runNotifying(ctx context.Context, p Prepared, emit func(Line)) (Exit, error) {
	if p.Started == nil {
		return Run(ctx, p.Spec, emit)
	}
	var once sync.Once
	started := func(err error) { once.Do(func() { p.Started(err) }) }
	exit, err := runWithStart(ctx, p.Spec, emit, started)
	started(err)
	return exit, err
}

func heartbeat(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			activity.RecordHeartbeat(ctx)
		}
	}
}

func appendTail(tail []string, line string, max int) []string {
	if len(line) > maxTailBytes/4 {
		line = strings.ToValidUTF8(line[:maxTailBytes/4], "") + "…"
	}
	tail = append(tail, line)
	if len(tail) > max {
		tail = tail[len(tail)-max:]
	}
	for size(tail) > maxTailBytes && len(tail) > 1 {
		tail = tail[1:]
	}
	return tail
}

func size(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return n
}

func exitCodeAttr(e Exit) any {
	if e.ExitCode == nil {
		return "signal"
	}
	return *e.ExitCode
}
