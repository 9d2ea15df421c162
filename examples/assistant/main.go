// Command assistant is the reference BAE assistant in Go: it opens a
// session, declares a client-side get_current_time tool (and, with -files,
// scoped file tools), and sends one prompt — or every line of stdin — through
// the SDK's tool-call loop. Tools the server's profile runs itself (MCP
// servers, sandboxes) show up as informational lines.
//
//	BAE_CLIENT_KEY=bae_… go run ./examples/assistant -prompt "What time is it?"
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/bae-go/bae-go/sdk"
	"github.com/bae-go/bae-go/sdk/tools"
)

func main() {
	prompt := flag.String("prompt", "", "message to send (default: read one message per line from stdin)")
	files := flag.String("files", "", "also offer read_file/write_file/explore_files scoped to this `DIR` (the profile must allow them)")
	verbose := flag.Bool("v", false, "print every live session event")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, log, *prompt, *files, *verbose); err != nil {
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "assistant:", describe(err))
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, prompt, filesDir string, verbose bool) error {
	cfg := sdk.ConfigFromEnv()
	cfg.ClientVersion = "bae-go-assistant/1"
	cfg.Logger = log
	if cfg.ClientKey == "" {
		return errors.New("BAE_CLIENT_KEY is not set (create one with `bin/baectl quickstart`)")
	}

	opts := []sdk.Option{
		sdk.WithTool(currentTime()),
		sdk.WithHooks(sdk.Hooks{
			OnEvent: func(_ context.Context, e sdk.Event) error {
				if verbose {
					fmt.Fprintf(os.Stderr, "  [event] %s\n", sdk.Describe(e))
				}
				return nil
			},
			AfterReceive: func(_ context.Context, m *sdk.Message) error {
				for _, tu := range m.ToolUses() {
					if tu.Dispatch != "" && tu.Dispatch != sdk.DispatchClient {
						fmt.Fprintf(os.Stderr, "  [server ran %s via %s]\n", tu.Name, tu.Dispatch)
					}
				}
				return nil
			},
			BeforeToolCall: func(_ context.Context, tu *sdk.ToolUse) error {
				fmt.Fprintf(os.Stderr, "  [tool] %s %s\n", tu.Name, tu.Input)
				return nil
			},
		}),
	}
	if filesDir != "" {
		opts = append(opts, sdk.WithTools(tools.FileTools(tools.FileConfig{
			AllowedDirs:      []string{filesDir},
			DeniedExtensions: []string{"env", "pem", "key"},
		})...))
	}

	s, err := sdk.Connect(ctx, cfg, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", cfg.ServerURL, err)
	}
	defer func() {
		// Close even after Ctrl-C, but do not hang on a dead server.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		// A session the server already ended (the error state after a
		// failed turn) needs no close.
		if err := s.Close(cctx); err != nil && !sdk.IsProblem(err, sdk.ProblemSessionClosed) {
			log.Warn("close session", "session_id", s.ID, "err", err)
		}
	}()
	mcp := "none"
	if len(s.Profile.MCPServers) > 0 {
		mcp = strings.Join(s.Profile.MCPServers, ", ")
	}
	log.Info("session open", "session_id", s.ID, "profile", s.Profile.Name,
		"provider", s.Profile.Provider.Provider, "model", s.Profile.Provider.Model, "mcp_servers", mcp)

	if prompt != "" {
		return ask(ctx, s, prompt)
	}
	in := bufio.NewScanner(os.Stdin)
	fmt.Fprint(os.Stderr, "> ")
	for in.Scan() {
		if line := strings.TrimSpace(in.Text()); line != "" {
			if err := ask(ctx, s, line); err != nil {
				return err
			}
		}
		fmt.Fprint(os.Stderr, "> ")
	}
	return in.Err()
}

func ask(ctx context.Context, s *sdk.Session, text string) error {
	reply, err := s.Send(ctx, text)
	if err != nil {
		return err
	}
	fmt.Println(reply.Text())
	return nil
}

// currentTime is the client-side tool the quickstart profile allows.
func currentTime() sdk.Tool {
	return sdk.Tool{
		Name:        "get_current_time",
		Description: "Return the current UTC time (RFC 3339). Optional input: an IANA time zone name.",
		InputSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"timezone": map[string]any{"type": "string", "description": "e.g. Europe/Paris"}},
		},
		Handler: func(_ context.Context, input json.RawMessage) (any, error) {
			var in struct {
				Timezone string `json:"timezone"`
			}
			_ = json.Unmarshal(input, &in)
			now := time.Now().UTC()
			if in.Timezone != "" {
				loc, err := time.LoadLocation(in.Timezone)
				if err != nil {
					return nil, fmt.Errorf("unknown time zone %q", in.Timezone) // sent to the model as is_error
				}
				now = now.In(loc)
			}
			return now.Format(time.RFC3339), nil
		},
	}
}

// describe adds a hint to the errors a first run usually meets.
func describe(err error) string {
	var pf *sdk.ProvidersFailedError
	switch {
	case errors.As(err, &pf):
		return err.Error() + " — check the provider's auth_token / base_url in bae-config.toml"
	case sdk.IsUnauthorized(err):
		return err.Error() + " — is BAE_CLIENT_KEY a valid, unrevoked client key?"
	case sdk.IsToolNotAllowed(err):
		return err.Error() + " — add the tool to the profile's allowed_tools"
	}
	return err.Error()
}
