// Package chaoslib is the chaos campaign on the production topology: the
// Temporal server built from its module on PostgreSQL and several `baesrv
// serve` replicas, driven by many sessions with several drivers and
// observers each through every feature at once (streamed turns with
// deltas, client tools, HTTP and stdio MCP tools, sandbox execs, a small
// context window so compaction runs, interrupts and Bae-When-Busy, resumed
// delta streams, budgets), while faults on a seeded random schedule kill
// and stop replicas, kill the Temporal server, cut PostgreSQL, make the
// provider fail, stall and drop streams, and let a client stop reading.
// At the end it checks invariants from the databases and from what the
// clients and the fake provider saw. bench/chaos is its command line;
// tests/chaos runs a short campaign in `make test`.
package chaoslib

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/bae-go/bae-go/internal/testing/testdb"
)

// TurnTimeout is the BAE_TURN_TIMEOUT the replicas run with: how long a
// turn paused on a client tool holds the gate.
const TurnTimeout = 5 * time.Second

// Options configure a campaign. Zero values take the defaults noted.
type Options struct {
	// Duration is how long faults are injected and turns driven (1h).
	Duration time.Duration
	// Sessions (50), each with Drivers (2) drivers and Observers (1)
	// observers.
	Sessions, Drivers, Observers int
	// Replicas is the number of baesrv processes (2, at least 2).
	Replicas int
	// FaultEvery is the mean pause between faults (Duration/400, at most
	// 10s): an hour injects well over 300.
	FaultEvery time.Duration
	// OutageLength is the long PostgreSQL outage (1m; a run shorter than
	// 20 minutes uses 15s).
	OutageLength time.Duration
	// Sandboxes is how many sessions run sandbox execs (Docker): every
	// fifth session by default, -1 for none.
	Sandboxes int
	// InterruptAny makes the interrupts name no turn (stop the running
	// turn, or else the paused one) instead of the turn being interrupted.
	InterruptAny bool
	// Seed makes the plan and the fault schedule reproducible; 0 picks one.
	Seed uint64
	// BaesrvPath is a prebuilt baesrv; "" builds ./cmd/baesrv.
	BaesrvPath string
	// DatabaseURL is the maintenance database the run creates its own from.
	DatabaseURL string
	// ServerEnv adds BAE_* variables to every replica.
	ServerEnv map[string]string
	// Break names an invariant whose input the checker corrupts on purpose
	// (a hidden debug switch, to see that invariant fire); see Invariants.
	Break string
	// Keep leaves the work dir and the databases in place.
	Keep bool
	Log  *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.Duration <= 0 {
		o.Duration = time.Hour
	}
	if o.Sessions <= 0 {
		o.Sessions = 50
	}
	if o.Drivers <= 0 {
		o.Drivers = 2
	}
	if o.Observers <= 0 {
		o.Observers = 1
	}
	if o.Replicas <= 0 {
		o.Replicas = 2
	}
	if o.Replicas < 2 {
		return o, fmt.Errorf("the production topology needs at least 2 replicas")
	}
	if o.FaultEvery <= 0 {
		o.FaultEvery = min(o.Duration/400, 10*time.Second)
		o.FaultEvery = max(o.FaultEvery, 2*time.Second)
	}
	if o.OutageLength <= 0 {
		o.OutageLength = time.Minute
		if o.Duration < 20*time.Minute {
			o.OutageLength = 15 * time.Second
		}
	}
	if o.Sandboxes == 0 {
		o.Sandboxes = max(1, o.Sessions/5)
	}
	if o.Sandboxes < 0 {
		o.Sandboxes = 0
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = DefaultDatabaseURL()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Break != "" && !isInvariant(o.Break) {
		return o, fmt.Errorf("-break %q: not an invariant (want one of %v)", o.Break, Invariants)
	}
	return o, nil
}

// DefaultDatabaseURL is BAE_TEST_DATABASE_URL, else the local postgres
// maintenance database.
func DefaultDatabaseURL() string {
	return testdb.BaseDatabaseURL()
}
