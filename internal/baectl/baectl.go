// Package baectl is the admin CLI for bae-go. It drives the admin REST API
// (/admin/v1) over the loopback admin port and finds the address and admin
// key on its own, so running it next to baesrv needs no flags. `setup` is
// the exception: it writes a deployment locally and calls no server.
//
// The command tree is built with cobra; Run executes it in-process with
// the given streams and environment, which lets tests drive every command
// against a real server.
package baectl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bae-go/bae-go/internal/lib/logfilter"
	"github.com/bae-go/bae-go/internal/lib/version"
)

// Exit codes, shared with baesrv.
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
)

// runFunc executes a parsed command with its positionals.
type runFunc func(ctx context.Context, e *invocation, args []string) error

// command is one leaf of the command tree, e.g. "create profile".
type command struct {
	path    string   // space-separated words
	args    []string // required positionals, by name, for usage and arity
	summary string
	// setup registers the command's own flags and returns the function that
	// runs once they are parsed; flag values live in its closure.
	setup func(fs *pflag.FlagSet) runFunc
}

// groups are the summaries of the non-leaf words.
var groups = map[string]string{
	"create":      "Create a profile or a client key",
	"list":        "List profiles, keys, sessions, events, approvals, providers, MCP servers or sandbox status",
	"get":         "Show a profile, an approval, the loaded configuration or sandbox status",
	"approve":     "Approve a pending tool call",
	"reject":      "Reject a pending tool call",
	"update":      "Replace a profile",
	"delete":      "Delete a profile or revoke a key",
	"revoke":      "Revoke a client key",
	"auth":        "Admin key material (local, no server call)",
	"auth create": "Generate admin key material locally",
}

// invocation is the state one Run call shares with the command it runs.
type invocation struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	env            LookupEnv
	global         globalOpts
	log            *slog.Logger
	client         *adminClient // built on first use: local commands never need it
}

// admin returns the admin API client, resolving address and token first.
func (e *invocation) admin() (*adminClient, error) {
	if e.client != nil {
		return e.client, nil
	}
	base, display := resolveAddr(e.global.adminAddr, e.env)
	token, source, err := resolveToken(e.global, e.env)
	if err != nil {
		return nil, err
	}
	e.client = &adminClient{
		conn: connection{baseURL: base, display: display, token: token, source: source, defaultKeyPath: defaultKeyFile(e.env)},
		http: &http.Client{},
		log:  e.log,
	}
	return e.client, nil
}

// Run executes baectl with args (without the program name) and returns the
// process exit code. Results go to stdout; diagnostics to stderr as
// `baectl: <message>`, followed by the command's usage for a usage error.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env LookupEnv) int {
	return RunWithInput(ctx, args, nil, stdout, stderr, env)
}

// RunWithInput is Run with a stdin for the interactive commands (setup);
// nil reads nothing.
func RunWithInput(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, env LookupEnv) int {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	e := &invocation{stdout: stdout, stderr: stderr, stdin: stdin, env: env, log: newLogger(stderr, env)}
	root := newRoot(e)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "baectl: %v\n", err)
	var re *ranError
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		return ExitUsage
	case errors.As(err, &re):
		return ExitRuntime
	default:
		// Anything cobra itself rejected: unknown flag or command, bad
		// flag value, wrong number of arguments.
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		return ExitUsage
	}
}

// ranError marks an error returned by a command's own code, as opposed to
// one the parser produced.
type ranError struct{ err error }

func (e *ranError) Error() string { return e.err.Error() }
func (e *ranError) Unwrap() error { return e.err }

// newLogger logs request traces to stderr only when BAE_LOG asks for debug
// (or trace), also as a BAE filter string such as "info,baesrv=debug", so
// normal output stays clean and scriptable.
func newLogger(stderr io.Writer, env LookupEnv) *slog.Logger {
	if logfilter.Parse(env.get("BAE_LOG")).Level() > slog.LevelDebug {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newRoot builds the cobra tree from commands(): one cobra command per
// leaf, and a group command for every word above a leaf.
func newRoot(e *invocation) *cobra.Command {
	root := &cobra.Command{
		Use:   "baectl",
		Short: "The bae-go admin CLI",
		Long: `baectl drives the bae-go admin API. Run next to baesrv it needs no flags:
it finds the admin port (BAE_ADMIN_ADDR, default 127.0.0.1:8081) and the
admin key (<BAE_DATA_DIR>/admin-key.pem) on its own.`,
		Version:       version.String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          groupArgs,
		RunE:          groupRun,
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetIn(e.stdin)
	root.SetVersionTemplate("baectl {{.Version}}\n")
	e.global.register(root.PersistentFlags())

	nodes := map[string]*cobra.Command{"": root}
	var parent func(path string) *cobra.Command
	parent = func(path string) *cobra.Command {
		if c, ok := nodes[path]; ok {
			return c
		}
		up, word := "", path
		if i := strings.LastIndex(path, " "); i >= 0 {
			up, word = path[:i], path[i+1:]
		}
		c := &cobra.Command{Use: word, Short: groups[path], Args: groupArgs, RunE: groupRun}
		parent(up).AddCommand(c)
		nodes[path] = c
		return c
	}
	for _, lc := range commands() {
		up, word := "", lc.path
		if i := strings.LastIndex(lc.path, " "); i >= 0 {
			up, word = lc.path[:i], lc.path[i+1:]
		}
		parent(up).AddCommand(leafCommand(e, word, lc))
	}
	return root
}

func leafCommand(e *invocation, word string, lc command) *cobra.Command {
	use := word
	for _, a := range lc.args {
		use += " <" + a + ">"
	}
	summary, _, _ := strings.Cut(lc.summary, "\n")
	c := &cobra.Command{
		Use:   use,
		Short: summary,
		Long:  lc.summary,
		Args:  exactArgs(lc.args),
	}
	run := lc.setup(c.Flags())
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := run(cmd.Context(), e, args); err != nil {
			var ue *usageError
			if errors.As(err, &ue) {
				return err
			}
			return &ranError{err: err}
		}
		return nil
	}
	return c
}

// exactArgs requires the named positionals, naming them when they are not.
func exactArgs(names []string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		want := "none"
		if len(names) > 0 {
			want = "<" + strings.Join(names, "> <") + ">"
		}
		return usagef("%s: expected %d argument(s) (%s), got %d", strings.TrimPrefix(cmd.CommandPath(), "baectl "), len(names), want, len(args))
	}
}

// groupArgs lets groupRun explain an unknown or missing subcommand.
func groupArgs(*cobra.Command, []string) error { return nil }

// groupRun runs when a group word is not followed by one of its commands.
func groupRun(cmd *cobra.Command, args []string) error {
	var words []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" && c.Name() != "completion" {
			words = append(words, c.Name())
		}
	}
	path := cmd.CommandPath()
	if len(args) > 0 {
		return usagef("unknown command %q for %q (want one of: %s)", args[0], path, strings.Join(words, ", "))
	}
	if !cmd.HasParent() {
		return usagef("missing command")
	}
	return usagef("%s: missing subcommand (want one of: %s)", strings.TrimPrefix(path, "baectl "), strings.Join(words, ", "))
}
