package launcher

import (
	"fmt"
	"strings"
)

// MissingEnvError says a ${VAR} reference names a variable the launcher's
// environment does not set. It fails that one invocation (a schedule skips
// the run, a trigger answers 500); it never becomes an empty value.
type MissingEnvError struct{ Var string }

func (e *MissingEnvError) Error() string {
	return fmt.Sprintf("environment variable %q referenced by ${%s} is not set", e.Var, e.Var)
}

// CheckEnvRefs reports a ${ with no closing } in s: a configuration mistake
// caught when the file is loaded rather than at the first run.
func CheckEnvRefs(s string) error {
	_, err := expand(s, func(string) (string, bool) { return "", true })
	return err
}

// ResolveEnvRefs replaces every ${VAR} in s with VAR's value from lookup. A
// literal $ not followed by { passes through. Called just before a spawn, so
// a resolved secret is never stored or logged.
func ResolveEnvRefs(s string, lookup func(string) (string, bool)) (string, error) {
	return expand(s, lookup)
}

// ResolveEnvMap resolves every value of env (keys are copied as they are).
func ResolveEnvMap(env map[string]string, lookup func(string) (string, bool)) (map[string]string, error) {
	out := make(map[string]string, len(env))
	for k, v := range env {
		r, err := expand(v, lookup)
		if err != nil {
			return nil, err
		}
		out[k] = r
	}
	return out, nil
}

func expand(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		end := strings.IndexByte(rest[i+2:], '}')
		if end < 0 {
			return "", &UsageError{Msg: fmt.Sprintf("unterminated ${...} reference (missing closing '}') in a value of length %d", len(s))}
		}
		name := rest[i+2 : i+2+end]
		v, ok := lookup(name)
		if !ok {
			return "", &MissingEnvError{Var: name}
		}
		b.WriteString(v)
		rest = rest[i+2+end+1:]
	}
}
