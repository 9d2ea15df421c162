// Command baeapi runs an agent of bae-api.toml (or bae-app.toml) for each
// POST /agents/{name}/trigger and streams its output back; with a web app,
// it also serves a chat page per agent (see docs/launchers.md).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/launcher"
	"github.com/bae-go/bae-go/internal/launcher/trigger"
	"github.com/bae-go/bae-go/internal/lib/healthprobe"
	"github.com/bae-go/bae-go/internal/lib/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func execute(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "baeapi",
		Short:         "Run agent harnesses on HTTP triggers (and serve their web app)",
		Args:          launcher.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			return run(ctx, lookup, stdout, stderr)
		},
		Version: version.String(),
	}
	root.SetVersionTemplate("baeapi {{.Version}}\n")
	root.AddCommand(&cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the baeapi in this container answers /healthz, else 1 (the image's HEALTHCHECK)",
		Args:  launcher.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return healthcheck(ctx, lookup)
		},
	})
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &launcher.UsageError{Msg: err.Error()} })
	err := root.Execute()
	if err != nil {
		fmt.Fprintln(stderr, "baeapi:", err)
	}
	return launcher.ExitCode(err)
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
	log := launcher.NewLogger(stderr, config.LogFromEnv(lookup))
	set, err := trigger.SettingsFromEnv(lookup)
	if err != nil {
		return err
	}
	if _, _, err := trigger.Load(set.ConfigPath); err != nil {
		return err
	}
	c, err := launcher.DialTemporal(lookup, log)
	if err != nil {
		return err
	}
	defer c.Close()
	return trigger.Run(ctx, trigger.Options{
		ConfigPath: set.ConfigPath, Addr: set.Addr, Token: set.Token, ShutdownTimeout: set.ShutdownTimeout,
		StaticDir: set.StaticDir, WebApp: set.WebApp,
		Client: c, Logger: log, Stdout: stdout, Stderr: stderr, Lookup: lookup,
	})
}
