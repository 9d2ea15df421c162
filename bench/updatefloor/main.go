// Command updatefloor times the Temporal round trip every bae-go turn makes,
// with nothing else in it: one Update to a running workflow whose handler
// returns at once (or after one local activity that does nothing), on the
// embedded Temporal server bench/turns uses, sequentially. It is the part of
// a turn's latency that no change to bae-go's own code can remove while a
// turn is an Update. See bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/devstack"
)

const (
	taskQueue  = "updatefloor"
	updateName = "turn"
)

// Echo is a workflow that answers updates until it is cancelled; an update
// with local set first runs one local activity, as a bae-go turn does.
func Echo(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandler(ctx, updateName, func(ctx workflow.Context, local bool) (bool, error) {
		if !local {
			return false, nil
		}
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
		var out bool
		err := workflow.ExecuteLocalActivity(lctx, Nothing, local).Get(ctx, &out)
		return out, err
	}); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// Nothing is the local activity: no I/O.
func Nothing(_ context.Context, v bool) (bool, error) { return v, nil }

type mode struct {
	name      string
	withStart bool // update-with-start, as bae-go submits a turn
	local     bool // the handler runs one local activity
}

func main() {
	n := flag.Int("n", 500, "updates per mode")
	sessions := flag.Int("sessions", 50, "workflows updated concurrently in the paced and closed-loop phases (0 skips them)")
	rate := flag.Float64("rate", 40, "updates/s across all workflows in the paced phase (0 skips it)")
	dur := flag.Duration("duration", 20*time.Second, "length of the paced and of the closed-loop phase")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the closed-loop phase to this file")
	flag.Parse()
	gc := app.TuneGC(os.LookupEnv)
	if err := run(*n, *sessions, *rate, *dur, *cpuprofile, gc); err != nil {
		fmt.Fprintln(os.Stderr, "updatefloor:", err)
		os.Exit(1)
	}
}

func run(n, sessions int, rate float64, dur time.Duration, cpuprofile string, gc int) error {
	ctx := context.Background()
	ports, err := benchstack.FreePorts(1)
	if err != nil {
		return err
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := devstack.Start(ctx, benchstack.TemporalOptions(ports[0], "", log))
	if err != nil {
		return err
	}
	defer srv.Stop()
	// Dialled as baesrv dials a loopback frontend: no gzip.
	c, err := client.Dial(client.Options{
		HostPort: srv.FrontendAddr(), Namespace: srv.Namespace(), Logger: log,
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflow(Echo)
	w.RegisterActivity(Nothing)
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()

	fmt.Printf("Temporal update round trip, embedded server, %d sequential updates per mode, gogc %d\n", n, gc)
	for _, m := range []mode{{"update", false, false}, {"update + local activity", false, true},
		{"update-with-start", true, false}, {"update-with-start + local activity", true, true}} {
		id := fmt.Sprintf("echo-%t-%t", m.withStart, m.local)
		if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, Echo); err != nil {
			return err
		}
		ds := make([]time.Duration, 0, n)
		for i := 0; i < n+n/10; i++ { // the first tenth warms up
			start := time.Now()
			if err := update(ctx, c, id, m); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			if i >= n/10 {
				ds = append(ds, time.Since(start))
			}
		}
		fmt.Printf("  %-36s %s\n", m.name, quantiles(ds))
	}
	if sessions == 0 {
		return nil
	}
	if rate > 0 {
		if err := concurrent(ctx, c, sessions, rate, dur, ""); err != nil {
			return fmt.Errorf("paced: %w", err)
		}
	}
	if err := concurrent(ctx, c, sessions, 0, dur, cpuprofile); err != nil {
		return fmt.Errorf("closed loop: %w", err)
	}
	return nil
}

// concurrent sends update-with-start + one local activity to each of
// sessions workflows for dur, after a warm-up of dur/10: each workflow
// waits for its previous update, and with rate > 0 also sends at most one
// update every sessions/rate seconds (staggered), as bench/turns paces its
// turns. Closed loop (rate 0) it is the most turns per second Temporal
// alone lets through, to compare with bench/turns's closed-loop capacity
// and its floor's; paced, the latency Temporal alone adds at that load.
func concurrent(ctx context.Context, c client.Client, sessions int, rate float64, dur time.Duration, cpuprofile string) error {
	m := mode{"update-with-start + local activity", true, true}
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		measuring atomic.Bool
		mu        sync.Mutex
		ds        []time.Duration
	)
	var every time.Duration
	if rate > 0 {
		every = time.Duration(float64(sessions) / rate * float64(time.Second))
	}
	g, gctx := errgroup.WithContext(run)
	for i := range sessions {
		id := fmt.Sprintf("loop-%d", i)
		g.Go(func() error {
			next := time.Now().Add(every * time.Duration(i) / time.Duration(sessions))
			for gctx.Err() == nil {
				if every > 0 {
					select {
					case <-time.After(time.Until(next)):
					case <-gctx.Done():
						return nil
					}
					next = next.Add(every)
				}
				start := time.Now()
				if err := update(gctx, c, id, m); err != nil {
					if gctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("%s: %w", id, err)
				}
				if measuring.Load() {
					mu.Lock()
					ds = append(ds, time.Since(start))
					mu.Unlock()
				}
			}
			return nil
		})
	}
	time.Sleep(dur / 10) // warm-up: every workflow started and cached
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	measuring.Store(true)
	start := time.Now()
	time.Sleep(dur)
	measuring.Store(false)
	if cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	elapsed := time.Since(start)
	cancel()
	if err := g.Wait(); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ds) == 0 {
		return fmt.Errorf("no update finished in %s", dur)
	}
	what := "closed loop"
	if rate > 0 {
		what = fmt.Sprintf("paced at %.0f/s", rate)
	}
	fmt.Printf("%s, %d workflows, %s: %.1f updates/s, %s\n", what, sessions, dur, float64(len(ds))/elapsed.Seconds(), quantiles(ds))
	return nil
}

// quantiles sorts ds and prints its p50, p90 and p99 (nearest rank).
func quantiles(ds []time.Duration) string {
	slices.Sort(ds)
	at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	return fmt.Sprintf("p50 %5.2f ms  p90 %5.2f  p99 %5.2f", at(0.5), at(0.9), at(0.99))
}

func update(ctx context.Context, c client.Client, id string, m mode) error {
	opts := client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: updateName, Args: []any{m.local}, WaitForStage: client.WorkflowUpdateStageCompleted}
	var h client.WorkflowUpdateHandle
	var err error
	if m.withStart {
		start := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
			ID: id, TaskQueue: taskQueue, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
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
