// Command crash measures crash recovery: it runs `baesrv serve` as a
// subprocess against an in-process Temporal, the fake provider, an MCP
// server of its own and a fresh PostgreSQL database (behind a TCP proxy
// that can cut it off), drives plain, client tool, Auto-mode sandbox and
// MCP turns through the Go SDK while SIGKILLing baesrv (or, with
// -kill-temporal, restarting Temporal) at random or aimed points and cutting
// PostgreSQL for a while, then checks from the event log, the sandbox
// counters and the MCP server that nothing was lost or repeated.
//
//	go run ./bench/crash                      # 100 turns, 4 sessions, 10 random kills
//	go run ./bench/crash -turns 600 -kills 200 -sandbox-share 0.2 -mcp-share 0.2 \
//	    -kill-at random,accept,resume,provider,sandbox,mcp -db-outages 1s,10s,60s -outage-repeat 4
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
	"strings"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/bench/crash/crashlib"
)

func main() {
	var o crashlib.Options
	flag.IntVar(&o.Turns, "turns", 100, "user turns across all sessions")
	flag.IntVar(&o.Sessions, "sessions", 4, "concurrent sessions, one driver each")
	flag.IntVar(&o.Kills, "kills", 10, "crashes to inflict")
	killAt := flag.String("kill-at", crashlib.PointRandom, "comma-separated kill points the kills are aimed at, in turn: "+strings.Join(crashlib.KillPoints, ","))
	outages := flag.String("db-outages", "", "comma-separated database outage lengths, e.g. 1s,10s,60s")
	repeat := flag.Int("outage-repeat", 1, "how many outages of each length")
	flag.BoolVar(&o.KillTemporal, "kill-temporal", false, "restart Temporal instead of killing baesrv")
	flag.Float64Var(&o.ToolShare, "tool-share", 0.3, "fraction of turns that are a client tool round trip")
	flag.Float64Var(&o.AbandonShare, "abandon-share", 0.2, "fraction of tool turns the client never answers (its next message abandons the pause)")
	flag.Float64Var(&o.SandboxShare, "sandbox-share", 0, "fraction of turns that run an Auto-mode sandbox command (needs Docker)")
	flag.Float64Var(&o.MCPShare, "mcp-share", 0, "fraction of turns that call an MCP tool")
	flag.DurationVar(&o.ToolDuration, "tool-duration", time.Second, "how long a sandbox command or MCP call runs")
	flag.Uint64Var(&o.Seed, "seed", 0, "random seed (0 picks one; printed)")
	flag.StringVar(&o.BaesrvPath, "baesrv", "", "prebuilt baesrv binary (default: go build ./cmd/baesrv)")
	flag.StringVar(&o.DatabaseURL, "db", crashlib.DefaultDatabaseURL(), "PostgreSQL maintenance database to create the run's database from")
	flag.DurationVar(&o.RecoverWithin, "recover-within", 3*time.Minute, "how long a client keeps resending one message before it counts as undelivered")
	flag.DurationVar(&o.MaxProviderDelay, "provider-delay", 50*time.Millisecond, "upper bound of the fake provider's random latency")
	flag.DurationVar(&o.MaxKillJitter, "kill-jitter", 80*time.Millisecond, "upper bound of the random delay before a random kill")
	flag.DurationVar(&o.AimWithin, "aim-within", 30*time.Second, "how long an aimed kill or outage waits for its point before firing anyway")
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
	o.KillAt = strings.Split(*killAt, ",")
	if *outages != "" {
		for _, f := range strings.Split(*outages, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || d <= 0 {
				fmt.Fprintf(os.Stderr, "crash: -db-outages: bad length %q\n", f)
				os.Exit(2)
			}
			for range *repeat {
				o.Outages = append(o.Outages, d)
			}
		}
	}

	benchstack.Campaign("crash", *verbose, func(ctx context.Context, log *slog.Logger) (*crashlib.Report, error) {
		o.Log = log
		return crashlib.Run(ctx, o)
	})
}
