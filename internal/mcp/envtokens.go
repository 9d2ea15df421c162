package mcp

import (
	"errors"
	"fmt"
	"strings"
)

// resolveEnvTokens replaces every ${NAME} in s with lookup(NAME). A "$" not
// followed by "{" is literal. An unset variable or an unterminated "${" is an
// error; the error names the variable but never carries any resolved value.
//
// It mirrors config.ResolveEnvTokens so this package does not depend on the
// config package's timing; the two must keep the same semantics.
func resolveEnvTokens(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		rest := s[i+2:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return "", errors.New("unterminated ${ token")
		}
		name := rest[:j]
		v, ok := lookup(name)
		if !ok {
			return "", fmt.Errorf("environment variable %q is not set", name)
		}
		b.WriteString(v)
		s = rest[j+1:]
	}
}
