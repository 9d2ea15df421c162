// Command baesrv is the bae-go server.
//
//	baesrv [--config <path>] [serve] [options]   production: external Temporal
//	baesrv [--config <path>] dev [options]       everything in one process
//	baesrv [--config <path>] migrate             apply database migrations
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/bae-go/bae-go/internal/adminkey"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/devstack"
	"github.com/bae-go/bae-go/internal/engine"
	"github.com/bae-go/bae-go/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		app.Fatal(err)
	}
}

type cliFlags struct {
	config           string
	adminKeyFile     string
	adminKeyHashFile string
	rotate           bool
	disableAuth      bool
}

// splitCommand finds the subcommand anywhere among the arguments, so flags
// may come before or after it.
func splitCommand(args []string) (string, []string) {
	cmd := ""
	rest := make([]string, 0, len(args))
	skipValue := false
	for _, a := range args {
		if skipValue {
			rest = append(rest, a)
			skipValue = false
			continue
		}
		if strings.HasPrefix(a, "-") {
			rest = append(rest, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && (name == "config" || name == "admin-key-file" || name == "admin-key-hash-file") {
				skipValue = true
			}
			continue
		}
		if cmd == "" {
			cmd = a
			continue
		}
		rest = append(rest, a)
	}
	if cmd == "" {
		cmd = "serve"
	}
	return cmd, rest
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	cmd, rest := splitCommand(args)
	var f cliFlags
	fs := flag.NewFlagSet("baesrv "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "path to bae-config.toml (overrides BAE_CONFIG)")
	fs.StringVar(&f.adminKeyFile, "admin-key-file", "", "plaintext admin key file (overrides BAE_ADMIN_KEY_FILE)")
	fs.StringVar(&f.adminKeyHashFile, "admin-key-hash-file", "", "pre-provisioned admin key hash file (overrides BAE_ADMIN_KEY_HASH_FILE)")
	fs.BoolVar(&f.rotate, "rotate-admin-key", false, "revoke the current admin key and mint a new one")
	fs.BoolVar(&f.disableAuth, "dangerously-disable-admin-auth", false, "serve the admin port without authentication")
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &config.ValidationError{Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return &config.ValidationError{Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}

	srv, err := config.ServerFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	if f.config != "" {
		srv.ConfigPath = f.config
	}
	if f.adminKeyFile != "" {
		srv.AdminKeyFile = f.adminKeyFile
	}
	if f.adminKeyHashFile != "" {
		srv.AdminKeyHashFile = f.adminKeyHashFile
	}
	disabled := srv.DisableAdminAuth || f.disableAuth
	if f.rotate && disabled {
		return &adminkey.UsageError{Msg: "--rotate-admin-key cannot be combined with --dangerously-disable-admin-auth"}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel()}))

	switch cmd {
	case "migrate":
		st, err := store.Open(ctx, srv.DatabaseURL, store.Options{MaxConns: 2})
		if err != nil {
			return err
		}
		st.Close()
		log.Info("migrations applied", "database", redactURL(srv.DatabaseURL))
		return nil
	case "serve", "dev":
	default:
		return &config.ValidationError{Msg: fmt.Sprintf("unknown command %q (want serve, dev or migrate)", cmd)}
	}

	file, err := config.LoadFile(srv.ConfigPath)
	if err != nil {
		return err
	}
	opts := app.Options{
		Server: srv, File: file, Log: log,
		Admin: adminkey.Options{KeyFile: srv.AdminKeyFile, HashFile: srv.AdminKeyHashFile, Rotate: f.rotate, Disabled: disabled},
	}
	if cmd == "dev" {
		dev, err := devstack.Start(ctx, devstack.Options{
			DataDir:          filepath.Join(srv.DataDir, "temporal"),
			FrontendPort:     srv.TemporalPort,
			UIPort:           srv.TemporalUIPort,
			Namespace:        srv.TemporalNamespace,
			Logger:           log,
			SearchAttributes: engine.SearchAttributes,
		})
		if err != nil {
			return fmt.Errorf("start embedded temporal: %w", err)
		}
		defer dev.Stop() //nolint:errcheck
		opts.Server.TemporalAddr = dev.FrontendAddr()
		if ui := dev.UIAddr(); ui != "" {
			log.Info("temporal web ui", "url", "http://"+ui)
		}
	}
	return app.Run(ctx, opts)
}

func logLevel() slog.Level {
	switch strings.ToLower(os.Getenv("BAE_LOG")) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

func redactURL(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}
