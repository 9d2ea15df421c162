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

// ReadFile reads a launcher's config file. A missing file is not an error:
// found is false. err is a file that exists but cannot be read; each
// launcher picks its own exit code and words for it.
func ReadFile(path string) (data []byte, found bool, err error) {
	data, err = os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w", path, err)
	}
	return data, true, nil
}

// DecodeConfig decodes the TOML data of the file at path into v, refusing
// unknown fields anywhere in it (a singular [agent] block or a typo'd key
// would otherwise leave the launcher with fewer agents than the operator
// wrote). freeForm names tables whose contents are the operator's own (a
// JSON Schema), as dotted paths ("agents.request_schema"). Every problem is a
// *UsageError naming path.
func DecodeConfig(path string, data []byte, v any, freeForm ...string) error {
	md, err := toml.Decode(string(data), v)
	if err != nil {
		return &UsageError{Msg: fmt.Sprintf("%s: %v", path, err)}
	}
	var keys []string
	for _, k := range md.Undecoded() {
		if !underAny(k, freeForm) {
			keys = append(keys, k.String())
		}
	}
	if len(keys) > 0 {
		sort.Strings(keys)
		return &UsageError{Msg: fmt.Sprintf("%s: unknown field(s) %s", path, strings.Join(keys, ", "))}
	}
	return nil
}

// Prefixed puts prefix (BAE's words for a bad file, which operators grep
// for) before the message of a *UsageError; other errors pass unchanged.
func Prefixed(err error, prefix string) error {
	var ue *UsageError
	if errors.As(err, &ue) {
		return &UsageError{Msg: prefix + ue.Msg}
	}
	return err
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
