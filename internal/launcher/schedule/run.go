package schedule

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/internal/launcher"
)

// Defaults of baesched's settings.
const (
	DefaultConfigPath       = "/etc/bae/bae-schedules.toml"
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultCatchupWindow    = time.Hour
	DefaultTaskQueue        = "baesched"
	DefaultHeartbeatTimeout = 30 * time.Second
	defaultSkipPoll         = 10 * time.Second
)

// Options configure Run.
type Options struct {
	ConfigPath string
	// ShutdownTimeout is the grace a running child gets after SIGTERM before
	// it is killed.
	ShutdownTimeout time.Duration
	// CatchupWindow: a fire missed while baesched was away still runs when it
	// comes back within this long; older ones are recorded as missed.
	CatchupWindow    time.Duration
	TaskQueue        string
	HeartbeatTimeout time.Duration
	SkipPoll         time.Duration
	Client           client.Client
	Logger           *slog.Logger
	Stdout, Stderr   io.Writer // where the children's attributed lines go
	Lookup           func(string) (string, bool)
	// Ready, when set, is called once the schedules match the file and the
	// worker runs.
	Ready func()
}

func (o *Options) defaults() {
	if o.TaskQueue == "" {
		o.TaskQueue = DefaultTaskQueue
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if o.SkipPoll == 0 {
		o.SkipPoll = defaultSkipPoll
	}
}

// Run loads the file, reconciles the schedules, and runs the launch worker
// until ctx ends; then it stops taking runs, gives running children
// ShutdownTimeout, kills the rest and returns nil.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	log := o.Logger
	f, found, err := Load(o.ConfigPath)
	if err != nil {
		return err
	}
	if !found {
		log.Warn("no config file found: schedule config file is absent; starting with zero agents", "path", o.ConfigPath)
	}
	if err := reconcile(ctx, o.Client.ScheduleClient(), f.Agents, &o, log); err != nil {
		return err
	}
	byName := make(map[string]Agent, len(f.Agents))
	for _, a := range f.Agents {
		byName[a.Name] = a
	}
	runner := &launcher.Runner{
		Stdout: o.Stdout, Stderr: o.Stderr, Logger: log, TailLines: 20,
		Prepare: func(_ context.Context, in launcher.LaunchInput) (launcher.Prepared, error) {
			a, ok := byName[in.Agent]
			if !ok {
				return launcher.Prepared{}, &launcher.SkipError{Reason: fmt.Sprintf("agent %q is not in %s", in.Agent, o.ConfigPath)}
			}
			env, err := launcher.ResolveEnvMap(a.Env, o.Lookup)
			if err != nil {
				return launcher.Prepared{}, err
			}
			return launcher.Prepared{Spec: launcher.Spec{Name: a.Name, Command: a.Command, Args: a.Args, Env: env, Dir: a.WorkingDir}}, nil
		},
	}
	w := worker.New(o.Client, o.TaskQueue, worker.Options{WorkerStopTimeout: o.ShutdownTimeout})
	w.RegisterWorkflowWithOptions(launcher.Launch, workflow.RegisterOptions{Name: launcher.WorkflowName})
	w.RegisterActivityWithOptions(runner.RunAgent, activity.RegisterOptions{Name: launcher.ActivityName})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start launch worker: %w", err)
	}
	log.Info("baesched running", "agents", len(f.Agents), "task_queue", o.TaskQueue)
	if o.Ready != nil {
		o.Ready()
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); watchSkips(watchCtx, o.Client.ScheduleClient(), f.Agents, o.SkipPoll, log) }()
	<-ctx.Done()
	stopWatch()
	<-done
	log.Info("shutting down: no new runs; running agents get the grace period", "grace", o.ShutdownTimeout.String())
	w.Stop()
	return nil
}
