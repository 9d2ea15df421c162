package launcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/version"
)

// Main runs a launcher's execute with the process's arguments, environment
// and streams, under a context that SIGINT and SIGTERM cancel, and exits
// with the code it returns.
func Main(execute func(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Command is a launcher's root command: run is its work; a stray argument
// or a bad flag is a usage error (exit 2), and Execute alone prints errors.
func Command(name, short string, run func() error) *cobra.Command {
	root := &cobra.Command{
		Use:           name,
		Short:         short,
		Args:          NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			return run()
		},
		Version: version.String(),
	}
	root.SetVersionTemplate(name + " {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Msg: err.Error()} })
	return root
}

// Execute runs root with args, prints its error on stderr after the
// launcher's name, and returns the process exit code (ExitCode).
func Execute(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err != nil {
		fmt.Fprintln(stderr, root.Name()+":", err)
	}
	return ExitCode(err)
}

// Serve is a launcher's run: its log, its settings from the environment and
// check (of the file they name) come before anything connects, so that a
// mistake in either exits 2 whether or not Temporal is reachable; serve
// then runs with a Temporal client, closed when it returns.
func Serve[S any](lookup func(string) (string, bool), stderr io.Writer, settings func(func(string) (string, bool)) (S, error), check func(S) error, serve func(S, client.Client, *slog.Logger) error) error {
	log := NewLogger(stderr, config.LogFromEnv(lookup))
	set, err := settings(lookup)
	if err != nil {
		return err
	}
	if err := check(set); err != nil {
		return err
	}
	c, err := DialTemporal(lookup, log)
	if err != nil {
		return err
	}
	defer c.Close()
	return serve(set, c, log)
}
