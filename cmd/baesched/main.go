// Command baesched runs the agents of bae-schedules.toml on their cron
// schedules, each as a Temporal Schedule (see docs/launchers.md).
//
//	baesched          reconcile the schedules with the file and run the agents
//	baesched runs     list recent runs: start, duration, outcome, exit code, output tail
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/launcher"
	"github.com/bae-go/bae-go/internal/launcher/schedule"
)

func main() { launcher.Main(execute) }

func execute(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	return launcher.Execute(command(ctx, lookup, stdout, stderr), args, stdout, stderr)
}

func command(ctx context.Context, lookup func(string) (string, bool), stdout, stderr io.Writer) *cobra.Command {
	root := launcher.Command("baesched", "Run agent harnesses on cron schedules, as Temporal Schedules", func() error {
		return run(ctx, lookup, stdout, stderr)
	})
	var agent string
	var limit int
	runs := &cobra.Command{
		Use:   "runs",
		Short: "List recent runs of the scheduled agents, newest first",
		Args:  launcher.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return listRuns(ctx, lookup, stdout, stderr, agent, limit)
		},
	}
	runs.Flags().StringVar(&agent, "agent", "", "only this agent's runs")
	runs.Flags().IntVar(&limit, "limit", 20, "how many runs at most")
	root.AddCommand(runs)
	return root
}

func run(ctx context.Context, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	// The file is checked before anything connects (launcher.Serve).
	return launcher.Serve(lookup, stderr, schedule.SettingsFromEnv, func(set schedule.Settings) error {
		_, _, err := schedule.Load(set.ConfigPath)
		return err
	}, func(set schedule.Settings, c client.Client, log *slog.Logger) error {
		return schedule.Run(ctx, schedule.Options{
			ConfigPath: set.ConfigPath, ShutdownTimeout: set.ShutdownTimeout, CatchupWindow: set.CatchupWindow,
			TaskQueue: set.TaskQueue,
			Client:    c, Logger: log, Stdout: stdout, Stderr: stderr, Lookup: lookup,
		})
	})
}

func listRuns(ctx context.Context, lookup func(string) (string, bool), stdout, stderr io.Writer, agent string, limit int) error {
	lc := config.LogFromEnv(lookup)
	if v, _ := lookup("BAE_LOG"); v == "" {
		lc.Level = slog.LevelWarn // a listing needs no connection chatter
	}
	log := launcher.NewLogger(stderr, lc)
	c, err := launcher.DialTemporal(lookup, log)
	if err != nil {
		return err
	}
	defer c.Close()
	runs, err := schedule.ListRuns(ctx, c, agent, limit)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTARTED\tDURATION\tOUTCOME\tEXIT\tLAST LINE")
	for _, r := range runs {
		dur, outcome, exit, last := "running", r.Status, "-", ""
		if !r.Close.IsZero() {
			dur = r.Close.Sub(r.Start).Round(time.Millisecond).String()
		}
		if r.Result.Outcome != "" {
			outcome = r.Result.Outcome
		}
		if r.Result.ExitCode != nil {
			exit = fmt.Sprint(*r.Result.ExitCode)
		}
		if n := len(r.Result.OutputTail); n > 0 {
			last = r.Result.OutputTail[n-1]
		} else if r.Result.Detail != "" {
			last = r.Result.Detail
		}
		if len(last) > 80 {
			last = last[:79] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Agent, r.Start.UTC().Format(time.RFC3339), dur, outcome, exit, last)
	}
	return tw.Flush()
}
