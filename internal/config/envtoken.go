package config

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnterminatedToken reports a "${" with no closing "}".
var ErrUnterminatedToken = errors.New("unterminated ${ in environment token")

// MissingEnvError reports a ${VAR} token whose variable is unset. It names
// the variable only; resolved values never appear in errors.
type MissingEnvError struct {
	Name string
}

func (e *MissingEnvError) Error() string {
	return fmt.Sprintf("environment variable %q is not set", e.Name)
}

// ResolveEnvTokens replaces every ${VAR} in s with lookup(VAR). A "$" not
// followed by "{" is kept as is. Callers resolve immediately before use and
// must not store, log or persist the result.
func ResolveEnvTokens(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		rest := s[i+2:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", ErrUnterminatedToken
		}
		name := rest[:end]
		value, ok := lookup(name)
		if !ok {
			return "", &MissingEnvError{Name: name}
		}
		b.WriteString(value)
		s = rest[end+1:]
	}
}
