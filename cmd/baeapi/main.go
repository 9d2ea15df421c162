// Command baeapi runs an agent of bae-api.toml (or bae-app.toml) for each
// POST /agents/{name}/trigger and streams its output back; with a web app,
// it also serves a chat page per agent (see docs/launchers.md).
package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/launcher"
	"github.com/bae-go/bae-go/internal/launcher/trigger"
	"github.com/bae-go/bae-go/internal/lib/healthprobe"
)

func main() { launcher.Main(execute) }

func execute(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	root := launcher.Command("baeapi", "Run agent harnesses on HTTP triggers (and serve their web app)", func() error {
		return run(ctx, lookup, stdout, stderr)
	})
	root.AddCommand(&cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the baeapi in this container answers /healthz, else 1 (the image's HEALTHCHECK)",
		Args:  launcher.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return healthcheck(ctx, lookup)
		},
	})
	return launcher.Execute(root, args, stdout, stderr)
}

// healthcheck probes the address run listens on: BAE_LAUNCHER_API_ADDR,
// else the file's [server] addr, else trigger.DefaultAddr.
func healthcheck(ctx context.Context, lookup func(string) (string, bool)) error {
	set, err := trigger.SettingsFromEnv(lookup)
	if err != nil {
		return err
	}
	addr := set.Addr
	if addr == "" {
		f, _, err := trigger.Load(set.ConfigPath)
		if err != nil {
			return err
		}
		addr = f.Server.Addr
	}
	if addr == "" {
		addr = trigger.DefaultAddr
	}
	url, err := healthprobe.URL(addr, "/healthz")
	if err != nil {
		return &launcher.UsageError{Msg: err.Error()}
	}
	return healthprobe.Check(ctx, url)
}

func run(ctx context.Context, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	return launcher.Serve(lookup, stderr, trigger.SettingsFromEnv, func(set trigger.Settings) error {
		_, _, err := trigger.Load(set.ConfigPath)
		return err
	}, func(set trigger.Settings, c client.Client, log *slog.Logger) error {
		return trigger.Run(ctx, trigger.Options{
			ConfigPath: set.ConfigPath, Addr: set.Addr, Token: set.Token, ShutdownTimeout: set.ShutdownTimeout,
			StaticDir: set.StaticDir, WebApp: set.WebApp,
			Client: c, Logger: log, Stdout: stdout, Stderr: stderr, Lookup: lookup,
		})
	})
}
