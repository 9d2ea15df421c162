//go:build chaos

// Package chaos runs a short chaos campaign (bench/chaos) in `make test`:
// the production topology (the Temporal server built from its module on
// PostgreSQL, two baesrv replicas) under every fault kind for five
// minutes, with zero violations of every invariant required; and then each
// invariant made to fire on the same data by breaking its guarantee on
// purpose. Run it alone with `make test-chaos`.
//
// Its interrupts name no turn (InterruptAny), as bench/chaos's do by
// default: they stop whatever turn runs, or else the paused one (the
// paused-turn bug they found, docs/benchmarks.md "Chaos" finding 1, is
// fixed).
//
// BAE_CHAOS_SEED replays a failing run's schedule; BAE_CHAOS_DURATION
// (default 5m) and BAE_CHAOS_SESSIONS (default 10) size it; BAE_CHAOS_BAESRV
// skips the build with a prebuilt binary.
package chaos

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/bench/chaos/chaoslib"
	"github.com/bae-go/bae-go/internal/testing/testdb"
)

func TestMain(m *testing.M) {
	// The replicas start this binary as their stdio MCP server.
	chaoslib.MaybeServeStdioMCP()
	os.Exit(m.Run())
}

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestChaosCampaign(t *testing.T) {
	o := chaoslib.Options{
		Duration:     5 * time.Minute,
		Sessions:     10,
		Sandboxes:    2,
		InterruptAny: true,
		DatabaseURL:  testdb.BaseDatabaseURL(),
		BaesrvPath:   os.Getenv("BAE_CHAOS_BAESRV"),
		Log:          slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if s := os.Getenv("BAE_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "BAE_CHAOS_SEED")
		o.Seed = seed
	}
	if s := os.Getenv("BAE_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "BAE_CHAOS_DURATION")
		o.Duration = d
	}
	if s := os.Getenv("BAE_CHAOS_SESSIONS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "BAE_CHAOS_SESSIONS")
		o.Sessions = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Duration+12*time.Minute)
	defer cancel()
	rep, err := chaoslib.Run(ctx, o)
	require.NoError(t, err)
	var out strings.Builder
	rep.Print(&out)
	t.Log("\n" + out.String())

	for kind, n := range rep.FaultCounts() {
		assert.Positive(t, n, "no %s fault was injected", kind)
	}
	// Every violation fails the test: the campaign's findings are fixed.
	assert.Empty(t, rep.Violations, "rerun with BAE_CHAOS_SEED=%d", rep.Options.Seed)
	assert.NotEmpty(t, rep.Input.Samples, "the replicas' runtime metrics were scraped (the growth check has data)")

	// Each invariant fires when its guarantee is broken on purpose in the
	// checker's input (the same data, one corruption each).
	for _, inv := range chaoslib.Invariants {
		vs := chaoslib.Check(rep.Input, inv)
		fired := 0
		for _, v := range vs {
			if v.Invariant == inv {
				fired++
			}
		}
		assert.Positive(t, fired, "breaking %s on purpose did not make it fire", inv)
		if fired > 0 {
			for _, v := range vs {
				if v.Invariant == inv {
					t.Logf("broken on purpose, %s fires: %s", inv, v.String())
					break
				}
			}
		}
	}
}
