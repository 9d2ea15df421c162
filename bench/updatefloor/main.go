// Command updatefloor times the Temporal round trip every bae-go turn makes,
// with nothing else in it (package bench/temporalfloor), on the embedded
// Temporal server bench/turns uses: sequentially for each way of sending
// the update, then with bench/turns's default load, paced and closed loop.
// See bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/bench/temporalfloor"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/devstack"
)

type options struct {
	n          int
	load       temporalfloor.Load
	cpuprofile string
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 500, "sequential updates per mode")
	flag.IntVar(&o.load.Sessions, "sessions", 50, "workflows updated concurrently in the paced and closed-loop phases (0 skips them)")
	flag.IntVar(&o.load.Turns, "turns", 40, "measured updates per workflow in the paced and closed-loop phases")
	flag.IntVar(&o.load.Warmup, "warmup", 1, "unmeasured updates per workflow first")
	flag.Float64Var(&o.load.Rate, "rate", 40, "updates/s across all workflows in the paced phase (0 skips it)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the closed-loop phase to this file")
	plain := flag.Bool("plain", false, "paced and closed-loop phases send plain updates (+ local activity) instead of update-with-start")
	flag.Parse()
	if *plain {
		o.load.Mode = temporalfloor.Modes[1]
	}
	gc := app.TuneGC(os.LookupEnv)
	if err := run(o, gc); err != nil {
		fmt.Fprintln(os.Stderr, "updatefloor:", err)
		os.Exit(1)
	}
}

func run(o options, gc int) error {
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
	w, err := temporalfloor.StartWorker(c)
	if err != nil {
		return err
	}
	defer w.Stop()

	fmt.Printf("Temporal update round trip, embedded server, %d sequential updates per mode, gogc %d\n", o.n, gc)
	for _, m := range temporalfloor.Modes {
		id := fmt.Sprintf("echo-%t-%t", m.WithStart, m.Local)
		if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: temporalfloor.TaskQueue}, temporalfloor.Echo); err != nil {
			return err
		}
		ds := make([]time.Duration, 0, o.n)
		for i := 0; i < o.n+o.n/10; i++ { // the first tenth warms up
			start := time.Now()
			if err := temporalfloor.Update(ctx, c, id, m); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if i >= o.n/10 {
				ds = append(ds, time.Since(start))
			}
		}
		fmt.Printf("  %-36s %s\n", m.Name, quantiles(ds))
	}
	if o.load.Sessions == 0 {
		return nil
	}
	if o.load.Rate > 0 {
		l := o.load
		l.Prefix = "paced-"
		if err := concurrent(ctx, c, l, ""); err != nil {
			return err
		}
	}
	l := o.load
	l.Rate, l.Prefix = 0, "loop-"
	return concurrent(ctx, c, l, o.cpuprofile)
}

// concurrent runs l and prints its throughput and latencies.
func concurrent(ctx context.Context, c client.Client, l temporalfloor.Load, cpuprofile string) error {
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		l.Measuring = func() { _ = pprof.StartCPUProfile(f) }
		defer pprof.StopCPUProfile()
	}
	what := "closed loop"
	if l.Rate > 0 {
		what = fmt.Sprintf("paced at %.0f/s", l.Rate)
	}
	res, err := temporalfloor.Run(ctx, c, l)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	fmt.Printf("%s, %d workflows x %d updates: %.1f updates/s, %s\n", what, l.Sessions, l.Turns, res.PerSecond(), quantiles(res.Latencies))
	return nil
}

// quantiles sorts ds and prints its p50, p90 and p99 (nearest rank).
func quantiles(ds []time.Duration) string {
	slices.Sort(ds)
	at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	return fmt.Sprintf("p50 %5.2f ms  p90 %5.2f  p99 %5.2f", at(0.5), at(0.9), at(0.99))
}
