package schedule

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/launcher"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
)

func writeConfig(t *testing.T, toml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bae-schedules.toml")
	require.NoError(t, os.WriteFile(p, []byte(toml), 0o600))
	return p
}

func TestLoadRefusesWhatBAERefuses(t *testing.T) {
	cases := map[string]struct{ toml, msg string }{
		"singular block":    {"[agent]\nname='a'\ncommand='x'\nschedule='* * * * * *'\n", "unknown field(s) agent"},
		"unknown field":     {"[[agents]]\nname='a'\ncommand='x'\nschedule='* * * * * *'\ncron='x'\n", "unknown field(s) agents.cron"},
		"five fields":       {"[[agents]]\nname='a'\ncommand='x'\nschedule='* * * * *'\n", `agent "a": invalid schedule`},
		"bad expression":    {"[[agents]]\nname='a'\ncommand='x'\nschedule='never-a-cron * * * * *'\n", `agent "a": invalid schedule`},
		"duplicate name":    {"[[agents]]\nname='a'\ncommand='x'\nschedule='* * * * * *'\n[[agents]]\nname='a'\ncommand='y'\nschedule='* * * * * *'\n", `duplicate agent name "a"`},
		"blank name":        {"[[agents]]\nname=' '\ncommand='x'\nschedule='* * * * * *'\n", "empty name"},
		"no command":        {"[[agents]]\nname='a'\nschedule='* * * * * *'\n", `agent "a" has no command`},
		"unterminated ${":   {"[[agents]]\nname='a'\ncommand='x'\nschedule='* * * * * *'\nenv={T='${X'}\n", "unterminated"},
		"bad toml":          {"[[agents]]\nname='a'\n\ncommand=[not valid\n", "toml: line 4"},
		"unknown top-level": {"[[agnts]]\nname='a'\n", "unknown field(s) agnts"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path := writeConfig(t, c.toml)
			_, _, err := Load(path)
			require.ErrorContains(t, err, c.msg)
			assert.True(t, strings.HasPrefix(err.Error(), "invalid schedule config: "+path+": "), "BAE's words, then the file: %v", err)
			assert.Equal(t, launcher.ExitUsage, launcher.ExitCode(err))
		})
	}
	_, found, err := Load(filepath.Join(t.TempDir(), "missing.toml"))
	require.NoError(t, err)
	assert.False(t, found)

	dir := t.TempDir()
	unreadable := filepath.Join(dir, "dir-not-file.toml")
	require.NoError(t, os.Mkdir(unreadable, 0o700))
	_, _, err = Load(unreadable)
	assert.Equal(t, launcher.ExitUsage, launcher.ExitCode(err), "baesched: an unreadable file is a usage error")
	assert.ErrorContains(t, err, "failed to read schedule config: "+unreadable)
}

// sched is a running baesched.
type sched struct {
	out, log *testlog.Buffer
	stop     context.CancelFunc
	done     chan error
}

func startSched(t *testing.T, c client.Client, path string, grace time.Duration, mod ...func(*Options)) *sched {
	t.Helper()
	s := &sched{out: &testlog.Buffer{}, log: &testlog.Buffer{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	ready := make(chan struct{})
	o := Options{
		ConfigPath: path, ShutdownTimeout: grace, CatchupWindow: time.Hour, HeartbeatTimeout: 5 * time.Second,
		SkipPoll: 200 * time.Millisecond, Client: c,
		Logger: launcher.NewLogger(s.log, config.Log{Level: slog.LevelDebug}),
		Stdout: s.out, Stderr: s.out, Lookup: func(k string) (string, bool) { return map[string]string{"SECRET": "hunter2"}[k], k == "SECRET" },
		Ready: func() { close(ready) },
	}
	for _, m := range mod {
		m(&o)
	}
	go func() { s.done <- Run(ctx, o) }()
	select {
	case <-ready:
	case err := <-s.done:
		t.Fatalf("baesched did not start: %v", err)
	}
	t.Cleanup(func() { s.shutdown(t) })
	return s
}

func (s *sched) shutdown(t *testing.T) {
	s.stop()
	if s.done != nil {
		require.NoError(t, <-s.done)
		s.done = nil
	}
}

func runsOf(t *testing.T, c client.Client, agent string) []RunInfo {
	t.Helper()
	runs, err := ListRuns(context.Background(), c, agent, 100)
	require.NoError(t, err)
	return runs
}

func completed(runs []RunInfo) int {
	n := 0
	for _, r := range runs {
		if r.Result.Outcome == launcher.OutcomeExited {
			n++
		}
	}
	return n
}

func TestSchedulesReconcileAndRun(t *testing.T) {
	ts := testenv.Temporal(t)
	c := ts.GetDefaultClient()
	sc := c.ScheduleClient()
	ctx := context.Background()

	// A stale schedule of an agent the file no longer names is deleted.
	_, err := sc.Create(ctx, client.ScheduleOptions{ID: ScheduleID("gone"), Spec: client.ScheduleSpec{CronExpressions: []string{"0 0 1 1 * * *"}},
		Action: &client.ScheduleWorkflowAction{Workflow: launcher.WorkflowName, TaskQueue: DefaultTaskQueue}})
	require.NoError(t, err)

	path := writeConfig(t, `
[[agents]]
name = "tick"
command = "sh"
args = ["-c", "echo tick $TOKEN"]
env = { TOKEN = "${SECRET}" }
schedule = "0 0 3 * * *"
`)
	s := startSched(t, c, path, 5*time.Second)
	_, err = sc.GetHandle(ctx, ScheduleID("gone")).Describe(ctx)
	require.Error(t, err, "the stale schedule was not deleted")
	d, err := sc.GetHandle(ctx, ScheduleID("tick")).Describe(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string(nil), d.Schedule.Spec.CronExpressions, "Temporal stores the expression as a calendar")
	require.Len(t, d.Schedule.Spec.Calendars, 1)
	assert.Equal(t, enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, d.Schedule.Policy.Overlap)

	// A trigger from the Temporal UI or CLI runs the agent now.
	require.NoError(t, sc.GetHandle(ctx, ScheduleID("tick")).Trigger(ctx, client.ScheduleTriggerOptions{}))
	require.Eventually(t, func() bool { return completed(runsOf(t, c, "tick")) == 1 }, 30*time.Second, 100*time.Millisecond)
	r := runsOf(t, c, "tick")[0]
	require.NotNil(t, r.Result.ExitCode)
	assert.Equal(t, 0, *r.Result.ExitCode)
	assert.Equal(t, []string{"[tick] tick hunter2"}, r.Result.OutputTail)
	assert.Contains(t, s.out.String(), "[tick] tick hunter2\n")
	assert.NotContains(t, s.log.String(), "hunter2", "a resolved secret is never logged")

	// A pause set in Temporal survives a restart of baesched.
	require.NoError(t, sc.GetHandle(ctx, ScheduleID("tick")).Pause(ctx, client.SchedulePauseOptions{Note: "by the operator"}))
	s.shutdown(t)
	startSched(t, c, path, 5*time.Second)
	d, err = sc.GetHandle(ctx, ScheduleID("tick")).Describe(ctx)
	require.NoError(t, err)
	assert.True(t, d.Schedule.State.Paused, "reconciling lifted the operator's pause")

	// A missing file: zero agents, BAE's warning.
	empty := startSched(t, c, filepath.Join(t.TempDir(), "absent.toml"), time.Second)
	assert.Contains(t, empty.log.String(), "no config file found: schedule config file is absent; starting with zero agents")
}

func TestOverlapSkipsAndCatchUpAfterRestart(t *testing.T) {
	ts := testenv.Temporal(t)
	c := ts.GetDefaultClient()
	ctx := context.Background()
	gate := filepath.Join(t.TempDir(), "gate")
	path := writeConfig(t, `
[[agents]]
name = "slow"
command = "sh"
args = ["-c", "while [ ! -e \"$GATE\" ]; do sleep 0.05; done; echo done"]
env = { GATE = "`+gate+`" }
schedule = "* * * * * *"
`)
	// No periodic read of the schedules during the test: a skip is logged
	// because its fire came, not because a poll found it later.
	s := startSched(t, c, path, 5*time.Second, func(o *Options) { o.SkipPoll = time.Hour })
	// Every second fires while the first run holds the gate: each is skipped
	// and logged with BAE's message when it is skipped.
	require.Eventually(t, func() bool {
		return strings.Count(s.log.String(), `agent "slow" skipped: previous invocation still running`) >= 2
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	require.Eventually(t, func() bool { return completed(runsOf(t, c, "slow")) >= 1 }, 30*time.Second, 100*time.Millisecond)

	// Down across fires: they queue as one run (overlap skip) that runs
	// once baesched is back, exactly once.
	require.NoError(t, sc(c).GetHandle(ctx, ScheduleID("slow")).Pause(ctx, client.SchedulePauseOptions{}))
	s.shutdown(t)
	before := completed(runsOf(t, c, "slow"))
	require.NoError(t, os.Remove(gate))
	require.NoError(t, sc(c).GetHandle(ctx, ScheduleID("slow")).Unpause(ctx, client.ScheduleUnpauseOptions{}))
	// Wait, with baesched away, until Temporal has fired and skipped again.
	require.Eventually(t, func() bool {
		d, err := sc(c).GetHandle(ctx, ScheduleID("slow")).Describe(ctx)
		return err == nil && len(d.Info.RunningWorkflows) == 1 && d.Info.NumActionsSkippedOverlap >= 2
	}, 30*time.Second, 100*time.Millisecond)
	require.NoError(t, sc(c).GetHandle(ctx, ScheduleID("slow")).Pause(ctx, client.SchedulePauseOptions{}))
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	s2 := startSched(t, c, path, 5*time.Second)
	require.Eventually(t, func() bool { return completed(runsOf(t, c, "slow")) == before+1 }, 30*time.Second, 100*time.Millisecond)
	d, err := sc(c).GetHandle(ctx, ScheduleID("slow")).Describe(ctx)
	require.NoError(t, err)
	assert.Empty(t, d.Info.RunningWorkflows)
	assert.Equal(t, before+1, completed(runsOf(t, c, "slow")), "the missed fires ran more than once")
	_ = s2
}

func sc(c client.Client) client.ScheduleClient { return c.ScheduleClient() }

func TestShutdownGraceThenKill(t *testing.T) {
	ts := testenv.Temporal(t)
	c := ts.GetDefaultClient()
	ctx := context.Background()
	path := writeConfig(t, `
[[agents]]
name = "hung"
command = "sh"
args = ["-c", "echo up; exec sleep 300"]
schedule = "0 0 3 * * *"
`)
	s := startSched(t, c, path, time.Second)
	require.NoError(t, c.ScheduleClient().GetHandle(ctx, ScheduleID("hung")).Trigger(ctx, client.ScheduleTriggerOptions{}))
	require.Eventually(t, func() bool { return strings.Contains(s.out.String(), "[hung] up") }, 30*time.Second, 50*time.Millisecond)
	s.shutdown(t) // returns nil (exit 0) once the grace is over and the child killed
	// The run's workflow is on baesched's own queue: its outcome is settled
	// when baesched is back. The run is not repeated.
	startSched(t, c, path, time.Second)
	require.Eventually(t, func() bool {
		runs := runsOf(t, c, "hung")
		return len(runs) == 1 && runs[0].Result.Outcome != ""
	}, 60*time.Second, 200*time.Millisecond)
	r := runsOf(t, c, "hung")[0]
	assert.Nil(t, r.Result.ExitCode)
	if r.Result.Outcome == launcher.OutcomeExited {
		assert.Equal(t, "killed: the launcher shut down while it ran", r.Result.Detail)
	} else {
		assert.Equal(t, launcher.OutcomeLost, r.Result.Outcome, "the completion may not reach Temporal from a stopping worker")
	}
}
