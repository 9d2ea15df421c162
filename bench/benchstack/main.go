package benchstack

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// DefaultDatabaseURL is the maintenance database a bench creates its own
// database from: BAE_BENCH_DATABASE_URL, else BAE_TEST_DATABASE_URL, else
// the local PostgreSQL that scripts/pg-up.sh starts.
func DefaultDatabaseURL() string {
	for _, k := range []string{"BAE_BENCH_DATABASE_URL", "BAE_TEST_DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Main runs a bench's body with an info logger on stderr and a context
// that ends on SIGINT or SIGTERM (so the stack and its database are torn
// down), and exits 1 when the body fails.
func Main(name string, body func(ctx context.Context, log *slog.Logger) error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := body(ctx, log)
	stop()
	if err != nil {
		log.Error(name+" bench failed", "err", err)
		os.Exit(1)
	}
}

// Report is what a checking campaign (chaos, crash) hands back.
type Report interface {
	Print(w io.Writer)
	OK() bool
}

// Campaign runs a checking campaign with a stderr logger (warnings only
// unless verbose) and a context that ends on SIGINT or SIGTERM, prints its
// report, and exits 2 when the run itself fails, 1 on any violation.
func Campaign[R Report](name string, verbose bool, run func(ctx context.Context, log *slog.Logger) (R, error)) {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(2)
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		os.Exit(1)
	}
}
