// Package baectl is the admin CLI for bae-go. It drives the admin REST API
// (/admin/v1) over the loopback admin port and finds the address and admin
// key on its own, so running it next to baesrv needs no flags.
//
// Commands are plain functions of (ctx, args, stdout, stderr, env) returning
// an exit code, which lets tests run them in-process against a real server.
package baectl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
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
	setup func(fs *flag.FlagSet) runFunc
}

// invocation is the state one Run call shares with the command it runs.
type invocation struct {
	stdout, stderr io.Writer
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
// `baectl: <message>`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env LookupEnv) int {
	e := &invocation{stdout: stdout, stderr: stderr, env: env, log: newLogger(stderr, env)}
	err := dispatch(ctx, e, args, commands())
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	default:
		fmt.Fprintf(stderr, "baectl: %v\n", err)
		var ue *usageError
		if errors.As(err, &ue) {
			return ExitUsage
		}
		return ExitRuntime
	}
}

// newLogger logs request traces to stderr only when BAE_LOG=debug, so normal
// output stays clean and scriptable.
func newLogger(stderr io.Writer, env LookupEnv) *slog.Logger {
	if !strings.EqualFold(env.get("BAE_LOG"), "debug") {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// dispatch walks the command path word by word, accepting global flags at
// every level, then parses the leaf's flags (interleaved with positionals)
// and runs it.
func dispatch(ctx context.Context, e *invocation, args []string, cmds []command) error {
	byPath := map[string]command{}
	for _, c := range cmds {
		byPath[c.path] = c
	}
	prefix := ""
	for {
		gfs := newFlagSet("baectl " + prefix)
		e.global.register(gfs)
		if err := gfs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(e.stdout, groupUsage(prefix, cmds, gfs))
				return err
			}
			return usagef("%s (see `%s --help`)", flagErr(err), strings.TrimSpace("baectl "+prefix))
		}
		args = gfs.Args()
		if len(args) == 0 {
			if prefix == "" {
				return usagef("missing command\n\n%s", groupUsage(prefix, cmds, gfs))
			}
			return usagef("%s: missing subcommand (want one of: %s)", prefix, strings.Join(nextWords(prefix, cmds), ", "))
		}
		path := strings.TrimSpace(prefix + " " + args[0])
		args = args[1:]
		if c, ok := byPath[path]; ok {
			return runLeaf(ctx, e, c, args)
		}
		if !hasChildren(path, cmds) {
			return usagef("unknown command %q (want one of: %s; see `%s --help`)",
				path, strings.Join(nextWords(prefix, cmds), ", "), strings.TrimSpace("baectl "+prefix))
		}
		prefix = path
	}
}

func hasChildren(prefix string, cmds []command) bool {
	for _, c := range cmds {
		if strings.HasPrefix(c.path, prefix+" ") {
			return true
		}
	}
	return false
}

func runLeaf(ctx context.Context, e *invocation, c command, args []string) error {
	fs := newFlagSet("baectl " + c.path)
	e.global.register(fs)
	run := c.setup(fs)
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(e.stdout, leafUsage(c, fs))
			return err
		}
		return usagef("%s: %v (see `baectl %s --help`)", c.path, flagErr(err), c.path)
	}
	if len(positional) != len(c.args) {
		return usagef("%s: expected %d argument(s) (%s), got %d (see `baectl %s --help`)",
			c.path, len(c.args), synopsisArgs(c), len(positional), c.path)
	}
	return run(ctx, e, positional)
}

func synopsisArgs(c command) string {
	parts := make([]string, len(c.args))
	for i, a := range c.args {
		parts[i] = "<" + a + ">"
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

func leafUsage(c command, fs *flag.FlagSet) string {
	syn := "baectl " + c.path
	if len(c.args) > 0 {
		syn += " " + synopsisArgs(c)
	}
	own := flagDefaults(fs, func(n string) bool { return !isGlobal(n) })
	if own == "" {
		own = "  (none)\n"
	}
	return fmt.Sprintf("usage: %s [flags]\n\n%s\n\nflags:\n%s\nglobal flags:\n%s", syn, c.summary, own, flagDefaults(fs, isGlobal))
}

func groupUsage(prefix string, cmds []command, gfs *flag.FlagSet) string {
	var b strings.Builder
	name := strings.TrimSpace("baectl " + prefix)
	fmt.Fprintf(&b, "usage: %s <command> [flags]\n\ncommands:\n", name)
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	for _, c := range childCommands(prefix, cmds) {
		syn := c.path
		if len(c.args) > 0 {
			syn += " " + synopsisArgs(c)
		}
		summary, _, _ := strings.Cut(c.summary, "\n")
		fmt.Fprintf(tw, "  %s\t%s\n", syn, summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "\nglobal flags (valid before or after any command):\n%s", flagDefaults(gfs, isGlobal))
	fmt.Fprintf(&b, "\nRun `baectl <command> --help` for a command's flags.\n")
	return b.String()
}

// childCommands are the commands under prefix, sorted by path.
func childCommands(prefix string, cmds []command) []command {
	var rows []command
	for _, c := range cmds {
		if prefix == "" || strings.HasPrefix(c.path, prefix+" ") {
			rows = append(rows, c)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].path < rows[j].path })
	return rows
}

// nextWords lists the distinct words that may follow prefix.
func nextWords(prefix string, cmds []command) []string {
	var words []string
	for _, c := range childCommands(prefix, cmds) {
		rest := strings.TrimPrefix(c.path, prefix+" ")
		if prefix == "" {
			rest = c.path
		}
		w, _, _ := strings.Cut(rest, " ")
		if !slices.Contains(words, w) {
			words = append(words, w)
		}
	}
	return words
}
