// Command crash measures crash recovery: it runs `baesrv serve` as a
// subprocess against an in-process Temporal, the fake provider and a fresh
// PostgreSQL database, drives turns over HTTP while SIGKILLing baesrv (or,
// with -kill-temporal, restarting Temporal) at random points, then checks
// from the event log that nothing was lost or repeated.
//
//	go run ./bench/crash                      # 100 turns, 4 sessions, 10 kills
//	go run ./bench/crash -kill-temporal -kills 4
//
// It exits 1 on any violation (the work dir and database are then kept).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bae-go/bae-go/bench/crash/crashlib"
)

func main() {
	var o crashlib.Options
	flag.IntVar(&o.Turns, "turns", 100, "user turns across all sessions")
	flag.IntVar(&o.Sessions, "sessions", 4, "concurrent sessions, one driver each")
	flag.IntVar(&o.Kills, "kills", 10, "crashes to inflict at random points")
	flag.BoolVar(&o.KillTemporal, "kill-temporal", false, "restart Temporal instead of killing baesrv")
	flag.Float64Var(&o.ToolShare, "tool-share", 0.3, "fraction of turns that are a client tool round trip")
	flag.Float64Var(&o.AbandonShare, "abandon-share", 0.2, "fraction of tool turns the client never answers (its next message abandons the pause)")
	flag.Uint64Var(&o.Seed, "seed", 0, "random seed (0 picks one; printed)")
	flag.StringVar(&o.BaesrvPath, "baesrv", "", "prebuilt baesrv binary (default: go build ./cmd/baesrv)")
	flag.StringVar(&o.DatabaseURL, "db", crashlib.DefaultDatabaseURL(), "PostgreSQL maintenance database to create the run's database from")
	flag.DurationVar(&o.RecoverWithin, "recover-within", 90*time.Second, "how long a client waits for a broken turn's reply to appear in the log")
	flag.DurationVar(&o.MaxProviderDelay, "provider-delay", 50*time.Millisecond, "upper bound of the fake provider's random latency")
	flag.DurationVar(&o.MaxKillJitter, "kill-jitter", 80*time.Millisecond, "upper bound of the random delay before each kill")
	flag.BoolVar(&o.Keep, "keep", false, "keep the work dir and database even on success")
	verbose := flag.Bool("v", false, "log progress")
	flag.Parse()
	// A flag's 0 means none; the library's 0 means its default.
	if o.ToolShare == 0 {
		o.ToolShare = -1
	}
	if o.AbandonShare == 0 {
		o.AbandonShare = -1
	}

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := crashlib.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		os.Exit(2)
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		os.Exit(1)
	}
}
