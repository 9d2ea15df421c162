package launcher

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// ReadConfig reads a launcher's TOML file at path into v, refusing unknown
// fields anywhere in it (a singular [agent] block or a typo'd key would
// otherwise leave the launcher with fewer agents than the operator wrote).
// A missing file is not an error: found is false and v is untouched.
// unreadable wraps a file that exists but cannot be read, so each launcher
// picks its own exit code for it. freeForm names tables whose contents are
// the operator's own (a JSON Schema), as dotted paths ("agents.request_schema").
func ReadConfig(path string, v any, unreadable func(error) error, freeForm ...string) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, unreadable(fmt.Errorf("%s: %w", path, err))
	}
	md, err := toml.Decode(string(data), v)
	if err != nil {
		return true, &UsageError{Msg: fmt.Sprintf("%s: %v", path, err)}
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, 0, len(und))
		for _, k := range und {
			if !underAny(k, freeForm) {
				keys = append(keys, k.String())
			}
		}
		if len(keys) == 0 {
			return true, nil
		}
		sort.Strings(keys)
		return true, &UsageError{Msg: fmt.Sprintf("%s: unknown field(s) %s", path, strings.Join(keys, ", "))}
	}
	return true, nil
}

// CheckNames refuses a blank or repeated agent name: the name is the log
// prefix, the trigger's path segment and the web app's card key at once.
func CheckNames(path string, names []string) error {
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		if strings.TrimSpace(n) == "" {
			return &UsageError{Msg: fmt.Sprintf("%s: agent %d has an empty name", path, i+1)}
		}
		if seen[n] {
			return &UsageError{Msg: fmt.Sprintf("%s: duplicate agent name %q", path, n)}
		}
		seen[n] = true
	}
	return nil
}

// CheckEnvMap refuses an unterminated ${ in any value of env, naming the
// agent and the variable (never the value).
func CheckEnvMap(path, agent string, env map[string]string) error {
	for k, v := range env {
		if err := CheckEnvRefs(v); err != nil {
			return &UsageError{Msg: fmt.Sprintf("%s: agent %q env %s: %v", path, agent, k, err)}
		}
	}
	return nil
}

func underAny(k toml.Key, prefixes []string) bool {
	for _, p := range prefixes {
		parts := strings.Split(p, ".")
		if len(k) > len(parts) && strings.Join(k[:len(parts)], ".") == p {
			return true
		}
	}
	return false
}
