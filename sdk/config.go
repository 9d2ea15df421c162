package sdk

import (
	"log/slog"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Environment variables read by ConfigFromEnv. The names match the
// TypeScript, Python and Rust SDKs' examples.
const (
	EnvServerURL = "BAE_SERVER_URL"
	EnvClientKey = "BAE_CLIENT_KEY"
)

// DefaultServerURL is the client port of a local baesrv (make dev).
const DefaultServerURL = "http://127.0.0.1:8080"

// Config says where the server is and how to authenticate to it.
type Config struct {
	// ServerURL is the base URL of the client port, e.g. http://127.0.0.1:8080.
	ServerURL string
	// ClientKey is the bae_… client key used to open or join sessions.
	ClientKey string
	// HTTPClient carries every request. It must not set a Timeout: turns
	// are long-lived streams; bound them with a context instead. Defaults
	// to http.DefaultClient.
	HTTPClient *http.Client
	// ClientVersion is recorded on the session.open/session.join event.
	ClientVersion string
	// Logger receives debug traces and best-effort failures (for example a
	// lifecycle report the server refused). Defaults to slog.Default().
	Logger *slog.Logger
	// SendRetries is how many times a message whose response was lost (no
	// response, a 5xx, or a stream that broke before its terminal line) is
	// sent again under the same Idempotency-Key: 0 means 3, negative never.
	// A broken stream is resent only when the server echoed the key, so a
	// server without the extension never gets a duplicate.
	SendRetries int
	// TracerProvider records the bae.client.send/bae.client.tool spans.
	// Defaults to the global provider (a no-op unless the application
	// installed an OpenTelemetry SDK).
	TracerProvider trace.TracerProvider
}

// ConfigFromEnv reads BAE_SERVER_URL (default DefaultServerURL) and
// BAE_CLIENT_KEY.
func ConfigFromEnv() Config {
	url := strings.TrimSpace(os.Getenv(EnvServerURL))
	if url == "" {
		url = DefaultServerURL
	}
	return Config{ServerURL: url, ClientKey: strings.TrimSpace(os.Getenv(EnvClientKey))}
}

// normalized fills in defaults without modifying the caller's copy.
func (c Config) normalized() Config {
	c.ServerURL = strings.TrimRight(strings.TrimSpace(c.ServerURL), "/")
	if c.ServerURL == "" {
		c.ServerURL = DefaultServerURL
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SendRetries == 0 {
		c.SendRetries = 3
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}
