// Command ask is an agent harness for the launchers (docs/launchers.md): it
// opens a bae-go session through the Go SDK, asks one question and prints
// the answer. The question is -question, else $AGENT_PROMPT (which the
// launcher configs in this directory fill from a trigger's body or set for
// a schedule). The server and key come from the SDK's usual variables.
//
//	ask -question "What is the capital of France?"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/bae-go/bae-go/sdk"
)

func main() {
	question := flag.String("question", "", "the question to ask (default $AGENT_PROMPT)")
	flag.Parse()
	// The launchers stop a harness with SIGTERM or SIGKILL; end the session
	// cleanly on the first.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	q := strings.TrimSpace(*question)
	if q == "" {
		q = strings.TrimSpace(os.Getenv("AGENT_PROMPT"))
	}
	if err := ask(ctx, sdk.ConfigFromEnv(), q, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ask:", err)
		os.Exit(1)
	}
}

func ask(ctx context.Context, cfg sdk.Config, question string, out io.Writer) error {
	if question == "" {
		return errors.New("no question: pass -question or set AGENT_PROMPT")
	}
	if cfg.ClientKey == "" {
		return errors.New("no client key: set the SDK's client key variable (see sdk/README.md)")
	}
	cfg.ClientVersion = "bae-go-launcher-ask/1"
	s, err := sdk.Connect(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", cfg.ServerURL, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	reply, err := s.Send(ctx, question)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, reply.Text())
	return err
}
