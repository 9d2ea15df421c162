// Package temporalfloor is the Temporal part of a bae-go turn with nothing
// else in it: an update-with-start to a running workflow whose handler runs
// one local activity that does no I/O, waited on to completion. Every
// bae-go turn makes that round trip; no change to bae-go's own code can
// remove it while a turn is an Update. bench/turns measures it under the
// same load as its turns (-floor) and bench/updatefloor on its own.
package temporalfloor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
)

// TaskQueue is where Echo runs, apart from bae-go's sessions.
const TaskQueue = "temporal-floor"

const updateName = "turn"

// Echo answers updates until it is cancelled; an update with local set
// first runs one local activity, as a bae-go text turn does.
func Echo(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandler(ctx, updateName, func(ctx workflow.Context, local bool) (bool, error) {
		if !local {
			return false, nil
		}
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
		var out bool
		err := workflow.ExecuteLocalActivity(lctx, Nothing, workflow.GetCurrentUpdateInfo(ctx).ID).Get(ctx, &out)
		return out, err
	}); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// stamping turns on laStarts: while set, Nothing records when it ran for
// each update id (Load.Stamps).
var (
	stamping atomic.Bool
	laStarts sync.Map // update id -> time.Time
)

// Nothing is the local activity: no I/O (a clock read and a map store
// while a run records its timeline).
func Nothing(_ context.Context, updateID string) (bool, error) {
	if stamping.Load() {
		laStarts.Store(updateID, time.Now())
	}
	return true, nil
}

// LocalActivityStarted is when Nothing ran for the update updateID, while
// a run with Load.Stamps was recording.
func LocalActivityStarted(updateID string) (time.Time, bool) {
	v, ok := laStarts.Load(updateID)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

// StartWorker runs Echo and Nothing on TaskQueue; stop it when done.
func StartWorker(c client.Client) (worker.Worker, error) {
	w := worker.New(c, TaskQueue, worker.Options{})
	w.RegisterWorkflow(Echo)
	w.RegisterActivity(Nothing)
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start temporal floor worker: %w", err)
	}
	return w, nil
}

// Mode is one way of sending the update.
type Mode struct {
	Name      string
	WithStart bool // update-with-start, as bae-go submits a turn
	Local     bool // the handler runs one local activity
}

// Turn is how bae-go submits a text turn.
var Turn = Mode{"update-with-start + local activity", true, true}

// Modes are the variants bench/updatefloor compares, Turn last.
var Modes = []Mode{{"update", false, false}, {"update + local activity", false, true}, {"update-with-start", true, false}, Turn}

// Update sends one update to workflow id (started by it when m.WithStart)
// and waits for its result.
func Update(ctx context.Context, c client.Client, id string, m Mode) error {
	return update(ctx, c, id, "", m)
}

// update is Update with the update's id (empty: the SDK picks one).
func update(ctx context.Context, c client.Client, id, updateID string, m Mode) error {
	opts := client.UpdateWorkflowOptions{WorkflowID: id, UpdateID: updateID, UpdateName: updateName, Args: []any{m.Local}, WaitForStage: client.WorkflowUpdateStageCompleted}
	var h client.WorkflowUpdateHandle
	var err error
	if m.WithStart {
		start := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
			ID: id, TaskQueue: TaskQueue, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, Echo)
		h, err = c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start, UpdateOptions: opts})
	} else {
		h, err = c.UpdateWorkflow(ctx, opts)
	}
	if err != nil {
		return err
	}
	var out bool
	return h.Get(ctx, &out)
}

// Load is a run's shape, bench/turns's: Sessions workflows, each sending
// Warmup updates and then Turns measured ones, one at a time; with Rate > 0
// all together send at most Rate per second (each workflow one every
// Sessions/Rate seconds, staggered), else as fast as they are answered.
type Load struct {
	Sessions, Warmup, Turns int
	Rate                    float64
	// Prefix keeps the workflow ids of two runs on one server apart.
	Prefix string
	// Mode is how each update is sent (zero: Turn).
	Mode Mode
	// Measuring, when set, is called as the measured updates begin.
	Measuring func()
	// Stamps records each measured update (Result.Updates) and when its
	// local activity ran (LocalActivityStarted), for a timeline.
	Stamps bool
}

// Result is a run's measured updates.
type Result struct {
	Latencies []time.Duration
	Elapsed   time.Duration // from the first measured update to the last answer
	// Updates are the measured updates when Load.Stamps was set.
	Updates []UpdateRec
}

// UpdateRec is one measured update: its workflow, its id, when it was sent
// and when its result was in the client's hands.
type UpdateRec struct {
	WorkflowID, UpdateID string
	Start, End           time.Time
}

// PerSecond is the measured updates per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Elapsed.Seconds()
}

func workflowID(prefix string, i int) string { return fmt.Sprintf("%sfloor-%d", prefix, i) }

// End terminates the workflows of a run of l, which otherwise wait for
// updates for as long as the server runs: a bench that runs l again on
// the same server keeps the earlier ones from weighing on it.
func End(ctx context.Context, c client.Client, l Load) error {
	var errs []error
	for i := range l.Sessions {
		if err := c.TerminateWorkflow(ctx, workflowID(l.Prefix, i), "", "bench run over"); err != nil {
			errs = append(errs, fmt.Errorf("terminate %s: %w", workflowID(l.Prefix, i), err))
		}
	}
	return errors.Join(errs...)
}

// Run sends l's updates through c (a worker from StartWorker must be
// running). Plain updates need their workflows started: Run starts them.
func Run(ctx context.Context, c client.Client, l Load) (Result, error) {
	m := l.Mode
	if m == (Mode{}) {
		m = Turn
	}
	var every time.Duration
	if l.Rate > 0 {
		every = time.Duration(float64(l.Sessions) / l.Rate * float64(time.Second))
	}
	var (
		mu    sync.Mutex
		res   Result
		ready sync.WaitGroup
	)
	begin := make(chan struct{})
	if l.Stamps {
		stamping.Store(true)
		defer stamping.Store(false)
	}
	ready.Add(l.Sessions)
	g, gctx := errgroup.WithContext(ctx)
	for i := range l.Sessions {
		id := workflowID(l.Prefix, i)
		g.Go(func() error {
			warm := func() error {
				defer ready.Done()
				if !m.WithStart {
					if _, err := c.ExecuteWorkflow(gctx, client.StartWorkflowOptions{ID: id, TaskQueue: TaskQueue}, Echo); err != nil {
						return fmt.Errorf("start %s: %w", id, err)
					}
				}
				for range l.Warmup {
					if err := Update(gctx, c, id, m); err != nil {
						return fmt.Errorf("warm-up %s: %w", id, err)
					}
				}
				return nil
			}
			if err := warm(); err != nil {
				return err
			}
			select {
			case <-begin:
			case <-gctx.Done():
				return gctx.Err()
			}
			next := time.Now().Add(every * time.Duration(i) / time.Duration(l.Sessions))
			for n := range l.Turns {
				if every > 0 {
					select {
					case <-time.After(time.Until(next)):
					case <-gctx.Done():
						return gctx.Err()
					}
					next = next.Add(every)
				}
				var uid string
				if l.Stamps {
					uid = fmt.Sprintf("%s-%d", id, n)
				}
				start := time.Now()
				if err := update(gctx, c, id, uid, m); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				end := time.Now()
				mu.Lock()
				res.Latencies = append(res.Latencies, end.Sub(start))
				if l.Stamps {
					res.Updates = append(res.Updates, UpdateRec{WorkflowID: id, UpdateID: uid, Start: start, End: end})
				}
				mu.Unlock()
			}
			return nil
		})
	}
	ready.Wait()
	if l.Measuring != nil {
		l.Measuring()
	}
	start := time.Now()
	close(begin)
	err := g.Wait()
	res.Elapsed = time.Since(start)
	return res, err
}
