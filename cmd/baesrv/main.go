// Command baesrv is the bae-go server.
//
//	baesrv [serve] [flags]   production: external Temporal (the default)
//	baesrv dev [flags]       everything in one process (build tag "dev")
//	baesrv migrate [flags]   apply database migrations and exit
//
// `baesrv --help` lists every subcommand and flag.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/lib/version"
	"github.com/bae-go/bae-go/store"
)

func main() {
	app.TuneGC(os.LookupEnv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs baesrv and reports a failure as `baesrv: <message>` on
// stderr, followed by the usage of the command for a command-line mistake.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout, stderr)
	if err == nil {
		return app.ExitOK
	}
	fmt.Fprintln(stderr, "baesrv:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "\n%s", ue.usage)
	}
	return app.ExitCode(err)
}

// usageError is a mistake on the command line, caught by the parser before
// any command ran. It unwraps to a config.ValidationError, so its exit code
// is 2 like every other configuration mistake.
type usageError struct {
	err   *config.ValidationError
	usage string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// ranError marks an error returned by a command itself, as opposed to one
// cobra produced while parsing.
type ranError struct{ err error }

func (e *ranError) Error() string { return e.err.Error() }
func (e *ranError) Unwrap() error { return e.err }

// cliFlags are the flags every subcommand accepts, before or after its name.
type cliFlags struct {
	config           string
	adminKeyFile     string
	adminKeyHashFile string
	rotate           bool
	disableAuth      bool
}

// run parses args and runs the chosen subcommand; the error's exit code is
// app.ExitCode(err).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var re *ranError
	if errors.As(err, &re) {
		return re.err
	}
	if cmd == nil {
		cmd = root
	}
	return &usageError{err: &config.ValidationError{Msg: err.Error()}, usage: cmd.UsageString()}
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var f cliFlags
	root := &cobra.Command{
		Use:   "baesrv",
		Short: "The bae-go server: the BAE client API on durable Temporal workflows and PostgreSQL",
		Long: `baesrv serves the client API (BAE_ADDR) and the loopback-only admin API
(BAE_ADMIN_ADDR), and runs the Temporal worker for session workflows.
Without a subcommand it runs serve. Settings come from BAE_* environment
variables and bae-config.toml; docs/configuration.md lists them all.`,
		Version:       version.String(),
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ran(serve(cmd.Context(), stderr, &f))
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("baesrv {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&f.config, "config", "", "path to bae-config.toml (overrides BAE_CONFIG)")
	pf.StringVar(&f.adminKeyFile, "admin-key-file", "", "plaintext admin key file (overrides BAE_ADMIN_KEY_FILE)")
	pf.StringVar(&f.adminKeyHashFile, "admin-key-hash-file", "", "pre-provisioned admin key hash file (overrides BAE_ADMIN_KEY_HASH_FILE)")
	pf.BoolVar(&f.rotate, "rotate-admin-key", false, "revoke the current admin key and mint a new one")
	pf.BoolVar(&f.disableAuth, "dangerously-disable-admin-auth", false, "serve the admin port without authentication")

	root.AddCommand(
		&cobra.Command{
			Use:   "serve",
			Short: "Run the server against the Temporal cluster at BAE_TEMPORAL_ADDR (production mode)",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return ran(serve(cmd.Context(), stderr, &f))
			},
		},
		devCommand(stderr, &f),
		&cobra.Command{
			Use:   "migrate",
			Short: "Create the database if it is missing, apply migrations and exit",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return ran(migrate(cmd.Context(), stderr, &f))
			},
		},
		importCommand(stdout, stderr, &f),
		healthcheckCommand(),
	)
	// Flag errors name the flag; a usageError adds the usage after it.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	return root
}

func ran(err error) error {
	if err == nil {
		return nil
	}
	return &ranError{err: err}
}

// options reads the environment, applies the flags over it and checks
// their combination.
func options(f *cliFlags) (config.Server, bool, error) {
	srv, err := config.ServerFromEnv(os.LookupEnv)
	if err != nil {
		return config.Server{}, false, err
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
		return config.Server{}, false, &adminkey.UsageError{Msg: "--rotate-admin-key cannot be combined with --dangerously-disable-admin-auth"}
	}
	return srv, disabled, nil
}

// newLogger is the server's stderr log: text, or one JSON object per line
// with BAE_LOG_FORMAT=json (for log collectors).
// BAE_LOG takes BAE's filter strings (package logfilter); directives that
// map to nothing here are named once, at info level.
func newLogger(stderr io.Writer) *slog.Logger {
	lc := config.LogFromEnv(os.LookupEnv)
	o := &slog.HandlerOptions{Level: lc.Level}
	var l *slog.Logger
	if lc.JSON {
		l = slog.New(slog.NewJSONHandler(stderr, o))
	} else {
		l = slog.New(slog.NewTextHandler(stderr, o))
	}
	if len(lc.Ignored) > 0 {
		l.Info("BAE_LOG directives ignored: they name no part of this server", "ignored", strings.Join(lc.Ignored, ","))
	}
	return l
}

// loadFile reads the config file, naming where its path came from when it
// is wrong.
func loadFile(srv config.Server, f *cliFlags) (*config.File, error) {
	file, err := config.LoadFile(srv.ConfigPath)
	if err != nil {
		from := "BAE_CONFIG"
		if f.config != "" {
			from = "--config"
		}
		return nil, fmt.Errorf("%w (from %s)", err, from)
	}
	return file, nil
}

// prepare is the common start of serve and dev: settings, log, config file.
func prepare(stderr io.Writer, f *cliFlags) (app.Options, error) {
	srv, disabled, err := options(f)
	if err != nil {
		return app.Options{}, err
	}
	file, err := loadFile(srv, f)
	if err != nil {
		return app.Options{}, err
	}
	return app.Options{
		Server: srv, File: file, Log: newLogger(stderr),
		Admin: adminkey.Options{KeyFile: srv.AdminKeyFile, HashFile: srv.AdminKeyHashFile, Rotate: f.rotate, Disabled: disabled},
	}, nil
}

func serve(ctx context.Context, stderr io.Writer, f *cliFlags) error {
	opts, err := prepare(stderr, f)
	if err != nil {
		return err
	}
	return app.Run(ctx, opts)
}

// migrate checks the same settings as serve but needs no config file.
func migrate(ctx context.Context, stderr io.Writer, f *cliFlags) error {
	srv, _, err := options(f)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, srv.DatabaseURL, store.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	st.Close()
	newLogger(stderr).Info("migrations applied", "database", redactURL(srv.DatabaseURL))
	return nil
}

func redactURL(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}
