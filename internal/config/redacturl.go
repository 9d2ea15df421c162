package config

import (
	"net/url"
	"regexp"
)

// RedactURL is how a configured URL (a provider's base_url, an MCP
// server's url, the OTLP endpoint) is shown anywhere outside the process
// that uses it: events, admin and console views, logs and error messages.
// The user info (https://user:password@host) and the query and fragment
// (?api_key=…) are dropped; scheme, host and path stay. A value that does
// not parse as a URL is masked whole.
func RedactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Redacted
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// DisplayBaseURL is the effective base URL as events and views show it.
func (p ProviderEntry) DisplayBaseURL() string { return RedactURL(p.EffectiveBaseURL()) }

// urlInText finds URLs in free text (error messages).
var urlInText = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// RedactURLsIn applies RedactURL to every URL in text, such as an error
// message that quotes the address it failed to reach.
func RedactURLsIn(text string) string {
	return urlInText.ReplaceAllStringFunc(text, RedactURL)
}
