package config

import (
	"crypto/tls"
	"net/url"
	"path/filepath"
	"time"
	"unicode/utf8"
)

// Console defaults.
const (
	DefaultConsoleSessionTTL = 12 * time.Hour
	// MinConsolePasswordLen bounds a password set through
	// BAE_CONSOLE_PASSWORD; generated ones are longer.
	MinConsolePasswordLen = 12
)

// Console holds the operator console's BAE_CONSOLE_* settings. The console
// is off unless Addr is set.
type Console struct {
	// Addr is BAE_CONSOLE_ADDR, the console's own listener; "" disables it.
	// It must be loopback unless the console is served over TLS.
	Addr string
	// Password is BAE_CONSOLE_PASSWORD; when empty the password is read
	// from PasswordFile, which is generated (0600) on first start.
	Password     string
	PasswordFile string // BAE_CONSOLE_PASSWORD_FILE
	// TLSCert and TLSKey (BAE_CONSOLE_TLS_CERT, BAE_CONSOLE_TLS_KEY) serve
	// the console over HTTPS.
	TLSCert string
	TLSKey  string
	// TLSTerminated (BAE_CONSOLE_TLS_TERMINATED) says a proxy in front
	// terminates TLS: cookies are marked Secure and a non-loopback address
	// is allowed.
	TLSTerminated bool
	// SessionTTL is how long a console login lasts (BAE_CONSOLE_SESSION_TTL).
	SessionTTL time.Duration
	// TemporalUIURL is the Temporal Web UI's base URL for links from a
	// session's turns (BAE_CONSOLE_TEMPORAL_UI_URL); "" shows no links.
	TemporalUIURL string
}

// TLSConfig reads the console's certificate and key; nil without them.
func (c Console) TLSConfig() (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, &ValidationError{Msg: "BAE_CONSOLE_TLS_CERT / BAE_CONSOLE_TLS_KEY", Err: err}
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Enabled reports whether the console is served.
func (c Console) Enabled() bool { return c.Addr != "" }

// Secure reports whether the browser reaches the console over HTTPS.
func (c Console) Secure() bool { return c.TLSCert != "" || c.TLSTerminated }

func consoleFromEnv(get func(name, def string) string, dataDir string) (Console, error) {
	c := Console{
		Addr:          get("BAE_CONSOLE_ADDR", ""),
		Password:      get("BAE_CONSOLE_PASSWORD", ""),
		PasswordFile:  get("BAE_CONSOLE_PASSWORD_FILE", filepath.Join(dataDir, "console-password.pem")),
		TLSCert:       get("BAE_CONSOLE_TLS_CERT", ""),
		TLSKey:        get("BAE_CONSOLE_TLS_KEY", ""),
		TLSTerminated: truthy(get("BAE_CONSOLE_TLS_TERMINATED", "")),
		TemporalUIURL: get("BAE_CONSOLE_TEMPORAL_UI_URL", ""),
	}
	var err error
	if c.SessionTTL, err = parseTimeout("BAE_CONSOLE_SESSION_TTL", get("BAE_CONSOLE_SESSION_TTL", ""), DefaultConsoleSessionTTL); err != nil {
		return Console{}, err
	}
	if c.SessionTTL < time.Second {
		return Console{}, invalidf("BAE_CONSOLE_SESSION_TTL: must be at least one second")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return Console{}, invalidf("BAE_CONSOLE_TLS_CERT and BAE_CONSOLE_TLS_KEY must be set together")
	}
	if c.Password != "" && utf8.RuneCountInString(c.Password) < MinConsolePasswordLen {
		return Console{}, invalidf("BAE_CONSOLE_PASSWORD: must be at least %d characters", MinConsolePasswordLen)
	}
	if c.TemporalUIURL != "" {
		u, perr := url.Parse(c.TemporalUIURL)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Console{}, invalidf("BAE_CONSOLE_TEMPORAL_UI_URL: %q is not an absolute http(s) URL", c.TemporalUIURL)
		}
	}
	if c.Addr == "" {
		return c, nil
	}
	if err := checkHostPort("BAE_CONSOLE_ADDR", c.Addr); err != nil {
		return Console{}, err
	}
	if !IsLoopbackAddr(c.Addr) && !c.Secure() {
		return Console{}, invalidf("BAE_CONSOLE_ADDR: %q is not a loopback address; off loopback the console must be served over TLS (BAE_CONSOLE_TLS_CERT and BAE_CONSOLE_TLS_KEY) or behind a TLS proxy (BAE_CONSOLE_TLS_TERMINATED=1)", c.Addr)
	}
	return c, nil
}
