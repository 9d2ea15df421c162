package config

import "strings"

// DisplayArgs is how a stdio MCP server's args are shown outside the
// process (admin and console views): as the config file writes them, as BAE
// shows them. A ${VAR} token stays the token, since views read the file and
// never what resolution produced. Only what looks like a credential is
// masked: a URL's user info, query and fragment (RedactURL), the value of an
// option named like a secret (--token=x, or --api-key x), and what follows
// "Bearer "/"Basic ". A value made only of ${VAR} tokens is shown: it names
// where the secret lives, not the secret.
func DisplayArgs(args []string) []string {
	out := make([]string, len(args))
	secretNext := false
	for i, a := range args {
		switch {
		case secretNext:
			out[i] = maskUnlessTokens(a)
		default:
			out[i] = displayArg(a)
		}
		secretNext = strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && secretName(a)
	}
	return out
}

func displayArg(a string) string {
	if name, value, ok := strings.Cut(a, "="); ok && secretName(name) {
		return name + "=" + maskUnlessTokens(value)
	}
	for _, scheme := range []string{"Bearer ", "Basic ", "bearer ", "basic "} {
		if rest, ok := strings.CutPrefix(a, scheme); ok {
			return scheme + maskUnlessTokens(rest)
		}
	}
	return RedactURLsIn(a)
}

// maskUnlessTokens masks v unless it is only ${VAR} tokens.
func maskUnlessTokens(v string) string {
	if onlyTokens(v) {
		return v
	}
	return Redacted
}

func onlyTokens(v string) bool {
	if v == "" {
		return false
	}
	for v != "" {
		rest, ok := strings.CutPrefix(v, "${")
		if !ok {
			return false
		}
		end := strings.IndexByte(rest, '}')
		if end <= 0 {
			return false
		}
		v = rest[end+1:]
	}
	return true
}

// secretWords are the parts of an option name that say its value is a
// credential.
var secretWords = map[string]bool{
	"token": true, "secret": true, "password": true, "passwd": true, "pass": true, "pwd": true,
	"key": true, "apikey": true, "auth": true, "authorization": true, "credential": true,
	"credentials": true, "bearer": true, "pat": true, "cookie": true,
}

// secretName reports whether an option name (--api-key, API_TOKEN,
// clientSecret) names a credential.
func secretName(name string) bool {
	name = strings.ToLower(strings.TrimLeft(name, "-"))
	if strings.Contains(name, "token") || strings.Contains(name, "secret") || strings.Contains(name, "passw") ||
		strings.Contains(name, "apikey") || strings.Contains(name, "credential") {
		return true
	}
	for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		if secretWords[part] {
			return true
		}
	}
	return false
}
