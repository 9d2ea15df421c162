// Command chaos runs the chaos campaign (package chaoslib) on the local
// production topology: the Temporal server built from its module on
// PostgreSQL and several `baesrv serve` replicas, 50 sessions with several
// drivers and observers each through every feature, faults on a seeded
// random schedule, invariants checked at the end. See bench/chaos/README.md.
//
//	go run ./bench/chaos                         # an hour
//	go run ./bench/chaos -duration 5m -sessions 12
//	go run ./bench/chaos -seed 42 -duration 20m  # reproduce a schedule
//
// It exits 1 on any violation (the work dir and databases are then kept).
package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/bench/chaos/chaoslib"
)

func main() {
	chaoslib.MaybeServeStdioMCP()
	var o chaoslib.Options
	flag.DurationVar(&o.Duration, "duration", time.Hour, "how long faults are injected and turns driven")
	flag.IntVar(&o.Sessions, "sessions", 50, "sessions")
	flag.IntVar(&o.Drivers, "drivers", 2, "drivers per session")
	flag.IntVar(&o.Observers, "observers", 1, "observers per session")
	flag.IntVar(&o.Replicas, "replicas", 2, "baesrv replicas (at least 2)")
	flag.DurationVar(&o.FaultEvery, "fault-every", 0, "mean pause between faults (default duration/400, 2s..10s)")
	flag.DurationVar(&o.OutageLength, "outage", 0, "the long PostgreSQL outage (default 1m; 15s in runs under 20m)")
	flag.IntVar(&o.Sandboxes, "sandboxes", 0, "sessions with sandbox execs (default every fifth; -1 none)")
	flag.BoolVar(&o.InterruptAny, "interrupt-any", true, "interrupts name no turn (stop the running turn, or else the paused one); false names the turn")
	flag.Uint64Var(&o.Seed, "seed", 0, "random seed (0 picks one; printed)")
	flag.StringVar(&o.BaesrvPath, "baesrv", "", "prebuilt baesrv binary (default: go build ./cmd/baesrv)")
	flag.StringVar(&o.DatabaseURL, "db", chaoslib.DefaultDatabaseURL(), "PostgreSQL maintenance database")
	flag.BoolVar(&o.Keep, "keep", false, "keep the work dir and databases even on success")
	// A debug switch, deliberately absent from -help: corrupt one
	// invariant's input so that it fires (see README).
	flag.StringVar(&o.Break, "break", "", "")
	verbose := flag.Bool("v", false, "log progress")
	flag.Parse()
	benchstack.Campaign("chaos", *verbose, func(ctx context.Context, log *slog.Logger) (*chaoslib.Report, error) {
		o.Log = log
		return chaoslib.Run(ctx, o)
	})
}
