// Package childenv is the one home of the environment bae-go gives a program
// it runs on someone's behalf (a stdio MCP server, a launcher's agent): only
// what a program needs to run, from the parent's own environment, plus the
// child's own configured variables. Nothing else of the parent's environment
// (its database URL, tokens, other children's secrets) reaches the child.
package childenv

import (
	"slices"
	"strings"
)

// Inherited reports whether a child gets the parent's variable name: where
// programs are, the home directory, the temporary directory, the time zone
// and the locale.
func Inherited(name string) bool {
	switch name {
	case "PATH", "HOME", "TMPDIR", "TZ", "LANG", "LANGUAGE":
		return true
	}
	return strings.HasPrefix(name, "LC_")
}

// Build is a child's environment (for exec.Cmd.Env): the Inherited entries
// of environ (os.Environ's form) that own does not set, then own's entries
// in name order. own's values are used as they are; resolving any ${VAR} in
// them is the caller's business.
func Build(environ []string, own map[string]string) []string {
	out := make([]string, 0, len(own)+8)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, mine := own[name]; !mine && Inherited(name) {
			out = append(out, kv)
		}
	}
	names := make([]string, 0, len(own))
	for name := range own {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		out = append(out, name+"="+own[name])
	}
	return out
}
