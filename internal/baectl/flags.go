package baectl

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// globalOpts are the connection flags accepted before or after any
// subcommand.
type globalOpts struct {
	adminAddr    string
	adminToken   string
	adminKeyFile string
}

// register binds the global flags on fs. The current values are used as
// defaults so that values parsed at an earlier level of the command path
// (e.g. `baectl --admin-addr X list profiles`) survive re-registration.
func (g *globalOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&g.adminAddr, "admin-addr", g.adminAddr, "admin API `HOST:PORT` (or a full URL); overrides BAE_ADMIN_ADDR, default 127.0.0.1:8081")
	fs.StringVar(&g.adminToken, "admin-token", g.adminToken, "admin bearer `TOKEN`; overrides BAE_ADMIN_TOKEN and every key file")
	fs.StringVar(&g.adminKeyFile, "admin-key-file", g.adminKeyFile, "`PATH` of a plaintext admin key file; overrides BAE_ADMIN_KEY_FILE")
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// newFlagSet returns a flag set that reports nothing itself: errors come
// back from Parse and are rendered by the dispatcher, which keeps stdout for
// --help and stderr for `baectl: ...` messages.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseInterleaved parses flags that may appear anywhere among the
// positionals, which the standard flag package does not support on its own.
// Everything after a literal "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// wasSet reports whether the named flag appeared on the command line, which
// distinguishes `--cursor ""` (first page, single-page mode) from no flag.
func wasSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

// isGlobal reports whether name is one of the globalOpts flags.
func isGlobal(name string) bool {
	switch name {
	case "admin-addr", "admin-token", "admin-key-file":
		return true
	}
	return false
}

// flagDefaults renders the flags of fs selected by keep, GNU style
// (--name VALUE), one per line with aligned descriptions.
func flagDefaults(fs *flag.FlagSet, keep func(name string) bool) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if !keep(f.Name) {
			return
		}
		value, usage := flag.UnquoteUsage(f)
		syn := "--" + f.Name
		if value != "" {
			syn += " " + value
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && !isGlobal(f.Name) {
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", syn, usage)
	})
	_ = tw.Flush()
	return b.String()
}

// usageError is a command-line mistake: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

// flagErr rephrases the flag package's errors in the --long style the help
// text uses.
func flagErr(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + name
	}
	if rest, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "flag --" + rest + " needs a value"
	}
	return msg
}
