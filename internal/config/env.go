package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bae-go/bae-go/internal/lib/keyhash"
)

// Defaults for the BAE_* environment variables.
const (
	DefaultAddr             = "0.0.0.0:8080"
	DefaultAdminAddr        = "127.0.0.1:8081"
	DefaultDatabaseURL      = "postgres://postgres@127.0.0.1:5432/bae?sslmode=disable"
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultTurnTimeout      = 120 * time.Second
	DefaultHeartbeatTimeout = 10 * time.Second
	// DefaultDBRetryBudget is how long each database step of a turn waits
	// out a database outage before the turn fails.
	DefaultDBRetryBudget = 5 * time.Minute
	// DefaultAuthFailureLimit is how many failed authentications per
	// minute one client address may make before getting 429s.
	DefaultAuthFailureLimit  = 30
	DefaultDataDir           = "./bae-data"
	DefaultSandboxDriver     = "docker"
	DefaultTemporalAddr      = "127.0.0.1:7233"
	DefaultTemporalNamespace = "default"
	DefaultTaskQueue         = "bae-sessions"
	DefaultTemporalUIPort    = 8233
	DefaultTemporalPort      = 7233
	DefaultMaxBodyBytes      = 4 << 20
	DefaultBodyReadTimeout   = 60 * time.Second
	// DefaultWorkflowCacheSize is the Temporal Go SDK's own default for
	// its sticky workflow cache (session workflows a worker keeps loaded).
	DefaultWorkflowCacheSize = 10000
	// DefaultMCPIdleTimeout is how long an MCP connection may sit unused
	// before it is closed (a stdio server's process ends with it).
	DefaultMCPIdleTimeout = 10 * time.Minute
)

// Defaults for the caps on what one client key, one profile and one
// session may hold at once (0 in the variable lifts a cap).
const (
	DefaultMaxSessionsPerKey      = 100
	DefaultMaxSessionsPerProfile  = 1000
	DefaultMaxSandboxesPerKey     = 4
	DefaultMaxSandboxesPerProfile = 16
	DefaultMaxStreamsPerSession   = 16
	DefaultMaxStreamsPerKey       = 64
	// A queued turn is a stored message and spends provider tokens when it
	// runs, whether or not its driver is still there.
	DefaultMaxQueuedTurnsPerSession = 16
	DefaultMaxQueuedTurnsPerKey     = 64
	// DefaultSessionIdleTTL closes a session nobody has used for a day.
	DefaultSessionIdleTTL = 24 * time.Hour
	// DefaultSandboxSweepInterval is how often a replica looks for sandbox
	// containers of its deployment whose session is not open.
	DefaultSandboxSweepInterval = 5 * time.Minute
)

// DefaultDevAddr is BAE_ADDR's default for `baesrv dev`, which is for one
// machine: the client port stays on loopback.
const DefaultDevAddr = "127.0.0.1:8080"

// Sandbox drivers accepted in BAE_SANDBOX_DRIVER.
const (
	SandboxDocker         = "docker"
	SandboxAppleContainer = "apple-container"
)

// Server holds the server's runtime settings from BAE_* variables.
type Server struct {
	Addr            string // BAE_ADDR, client-facing listener
	AdminAddr       string // BAE_ADMIN_ADDR, always loopback
	DatabaseURL     string // BAE_DATABASE_URL
	ShutdownTimeout time.Duration
	TurnTimeout     time.Duration
	// HeartbeatTimeout is how long a provider or tool activity on a lost
	// worker is held before Temporal retries it on another
	// (BAE_ACTIVITY_HEARTBEAT_TIMEOUT).
	HeartbeatTimeout time.Duration
	// DBRetryBudget is BAE_DB_RETRY_BUDGET: how long each database step of
	// a turn (begin, each event append, finish) waits out an outage.
	DBRetryBudget time.Duration
	// AuthFailureLimit is BAE_AUTH_FAILURE_LIMIT: failed authentications
	// per minute per client address before 429 (0 disables the limit).
	AuthFailureLimit int
	ConfigPath       string // BAE_CONFIG; "" means no config file
	AdminKeyFile     string
	AdminKeyHashFile string
	DisableAdminAuth bool
	// IdleUpdate is BAE_IDLE_UPDATE: admit a message to an idle session
	// with a SendIdle Update (on by default; 0 or false turns it off).
	IdleUpdate bool
	// DeltasInterest is BAE_DELTAS_INTEREST: this replica announces the
	// sessions whose deltas it wants and is sent only those (the
	// default); off, it announces nothing and sends every delta to every
	// replica, as replicas of a version before announcements do.
	DeltasInterest bool
	// KeyHash is BAE_KEY_HASH: how new keys' hashes are written
	// ("argon2id", the default, or "sha256"); both are always read.
	KeyHash           string
	SandboxDriver     string
	TemporalAddr      string
	TemporalNamespace string
	TaskQueue         string
	DataDir           string
	TemporalUIPort    int
	TemporalPort      int
	// MaxBodyBytes bounds client-port request bodies (BAE_MAX_BODY_BYTES).
	MaxBodyBytes int64
	// BodyReadTimeout bounds how long a request body may take to arrive
	// (BAE_BODY_READ_TIMEOUT), against clients that trickle it.
	BodyReadTimeout time.Duration
	// MaxConcurrentOpens is BAE_MAX_CONCURRENT_OPENS: session opens, joins
	// and driver registrations doing their work at once on this replica;
	// 0 (unset) leaves the choice to the server (half its CPUs).
	MaxConcurrentOpens int
	// WorkflowCacheSize is BAE_WORKFLOW_CACHE_SIZE: how many session
	// workflows this replica's worker keeps loaded between their workflow
	// tasks (Temporal's sticky cache). A loaded workflow holds a goroutine
	// and its state; an evicted one costs nothing until its next task
	// replays its history.
	WorkflowCacheSize int
	// TrustedProxies (BAE_TRUSTED_PROXIES) are the reverse proxies whose
	// X-Forwarded-For header names the client address for rate limiting.
	TrustedProxies []netip.Prefix
	// Caps bound what one client key and one profile may hold
	// (BAE_MAX_SESSIONS_PER_KEY, BAE_MAX_SESSIONS_PER_PROFILE,
	// BAE_MAX_SANDBOXES_PER_KEY, BAE_MAX_SANDBOXES_PER_PROFILE); 0 lifts one.
	MaxSessionsPerKey      int
	MaxSessionsPerProfile  int
	MaxSandboxesPerKey     int
	MaxSandboxesPerProfile int
	// MaxStreamsPerSession and MaxStreamsPerKey bound the live
	// session.subscribe streams and session.sendMessage relays on one
	// session and on one client key, per replica
	// (BAE_MAX_STREAMS_PER_SESSION, BAE_MAX_STREAMS_PER_KEY).
	MaxStreamsPerSession int
	MaxStreamsPerKey     int
	// MaxQueuedTurnsPerSession and MaxQueuedTurnsPerKey bound the turns
	// stored and not yet begun, of one session and of one client key, over
	// all replicas (BAE_MAX_QUEUED_TURNS_PER_SESSION,
	// BAE_MAX_QUEUED_TURNS_PER_KEY).
	MaxQueuedTurnsPerSession int
	MaxQueuedTurnsPerKey     int
	// SessionIdleTTL (BAE_SESSION_IDLE_TTL) closes a session with no
	// event for that long; 0 keeps idle sessions open.
	SessionIdleTTL time.Duration
	// SandboxSweepInterval is BAE_SANDBOX_SWEEP_INTERVAL: how often, after
	// the sweep at start, this replica removes the sandbox containers of
	// its deployment whose session is not open; 0 sweeps at start only.
	SandboxSweepInterval time.Duration
	// Console is the operator console (BAE_CONSOLE_*); off by default.
	Console Console
	// Temporal is how serve reaches the Temporal frontend (TLS, API key,
	// compression).
	Temporal TemporalConn
	// MCPIdleTimeout is BAE_MCP_IDLE_TIMEOUT: an MCP connection unused for
	// this long is closed and opened again on next use; 0 keeps it until
	// its session closes.
	MCPIdleTimeout time.Duration
	// MetricsAddr is BAE_METRICS_ADDR, where GET /metrics serves the
	// Prometheus exposition: "" (off), MetricsOnAdmin, or a host:port of
	// its own.
	MetricsAddr string
	// Pprof is BAE_PPROF: serve the Go runtime's profiles (net/http/pprof)
	// under /debug/pprof/ beside /metrics. Off unless set, and only with
	// BAE_METRICS_ADDR: a profile names every goroutine's stack, and a CPU
	// profile or trace costs the replica while it runs.
	Pprof bool
}

// MetricsOnAdmin as BAE_METRICS_ADDR serves /metrics on the admin port.
const MetricsOnAdmin = "admin"

// ServerFromEnv reads the BAE_* variables through lookup (os.LookupEnv in
// production; a map in tests, so they never touch the process env). A
// variable set to an empty or blank value counts as unset. Every bad value is
// a *ValidationError naming the variable.
func ServerFromEnv(lookup func(string) (string, bool)) (Server, error) {
	get := func(name, def string) string {
		if v, ok := lookup(name); ok {
			if v = strings.TrimSpace(v); v != "" {
				return v
			}
		}
		return def
	}
	var err error
	s := Server{
		Addr:              get("BAE_ADDR", DefaultAddr),
		AdminAddr:         get("BAE_ADMIN_ADDR", DefaultAdminAddr),
		DatabaseURL:       get("BAE_DATABASE_URL", DefaultDatabaseURL),
		ConfigPath:        get("BAE_CONFIG", ""),
		DataDir:           get("BAE_DATA_DIR", DefaultDataDir),
		SandboxDriver:     get("BAE_SANDBOX_DRIVER", DefaultSandboxDriver),
		TemporalAddr:      get("BAE_TEMPORAL_ADDR", DefaultTemporalAddr),
		TemporalNamespace: get("BAE_TEMPORAL_NAMESPACE", DefaultTemporalNamespace),
		TaskQueue:         get("BAE_TASK_QUEUE", DefaultTaskQueue),
	}
	s.AdminKeyFile = get("BAE_ADMIN_KEY_FILE", filepath.Join(s.DataDir, "admin-key.pem"))
	s.AdminKeyHashFile = get("BAE_ADMIN_KEY_HASH_FILE", filepath.Join(s.DataDir, "admin-key-hash.pem"))
	s.DisableAdminAuth = truthy(get("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH", ""))
	s.IdleUpdate = !falsy(get("BAE_IDLE_UPDATE", ""))
	s.DeltasInterest = !falsy(get("BAE_DELTAS_INTEREST", ""))
	s.KeyHash = strings.ToLower(get("BAE_KEY_HASH", keyhash.SchemeArgon2id))
	if _, err := keyhash.ForScheme(s.KeyHash); err != nil {
		return Server{}, invalidf("BAE_KEY_HASH: %v", err)
	}

	if err = checkHostPort("BAE_ADDR", s.Addr); err != nil {
		return Server{}, err
	}
	if err = checkHostPort("BAE_ADMIN_ADDR", s.AdminAddr); err != nil {
		return Server{}, err
	}
	if !IsLoopbackAddr(s.AdminAddr) {
		return Server{}, invalidf("BAE_ADMIN_ADDR: %q is not a loopback address; the admin port must bind to localhost only", s.AdminAddr)
	}
	if s.SandboxDriver != SandboxDocker && s.SandboxDriver != SandboxAppleContainer {
		return Server{}, invalidf("BAE_SANDBOX_DRIVER: %q is not a supported sandbox driver (expected \"docker\" or \"apple-container\")", s.SandboxDriver)
	}
	if s.ShutdownTimeout, err = parseTimeout("BAE_SHUTDOWN_TIMEOUT", get("BAE_SHUTDOWN_TIMEOUT", ""), DefaultShutdownTimeout); err != nil {
		return Server{}, err
	}
	if s.HeartbeatTimeout, err = parseTimeout("BAE_ACTIVITY_HEARTBEAT_TIMEOUT", get("BAE_ACTIVITY_HEARTBEAT_TIMEOUT", ""), DefaultHeartbeatTimeout); err != nil {
		return Server{}, err
	}
	if s.DBRetryBudget, err = parseTimeout("BAE_DB_RETRY_BUDGET", get("BAE_DB_RETRY_BUDGET", ""), DefaultDBRetryBudget); err != nil {
		return Server{}, err
	}
	if s.DBRetryBudget == 0 {
		return Server{}, invalidf("BAE_DB_RETRY_BUDGET: %q must be greater than zero", get("BAE_DB_RETRY_BUDGET", ""))
	}
	if s.TurnTimeout, err = parseTimeout("BAE_TURN_TIMEOUT", get("BAE_TURN_TIMEOUT", ""), DefaultTurnTimeout); err != nil {
		return Server{}, err
	}
	if s.BodyReadTimeout, err = parseTimeout("BAE_BODY_READ_TIMEOUT", get("BAE_BODY_READ_TIMEOUT", ""), DefaultBodyReadTimeout); err != nil {
		return Server{}, err
	}
	if s.BodyReadTimeout == 0 {
		return Server{}, invalidf("BAE_BODY_READ_TIMEOUT: %q must be greater than zero", get("BAE_BODY_READ_TIMEOUT", ""))
	}
	if s.MCPIdleTimeout, err = parseTimeout("BAE_MCP_IDLE_TIMEOUT", get("BAE_MCP_IDLE_TIMEOUT", ""), DefaultMCPIdleTimeout); err != nil {
		return Server{}, err
	}
	if s.MaxBodyBytes, err = parseByteSize("BAE_MAX_BODY_BYTES", get("BAE_MAX_BODY_BYTES", ""), DefaultMaxBodyBytes); err != nil {
		return Server{}, err
	}
	if s.TrustedProxies, err = ParseTrustedProxies(get("BAE_TRUSTED_PROXIES", "")); err != nil {
		return Server{}, invalidf("BAE_TRUSTED_PROXIES: %v", err)
	}
	if s.AuthFailureLimit, err = parseCount("BAE_AUTH_FAILURE_LIMIT", get("BAE_AUTH_FAILURE_LIMIT", ""), DefaultAuthFailureLimit, 0); err != nil {
		return Server{}, err
	}
	count := func(name string, into *int, def int) error {
		var err error
		*into, err = parseCount(name, get(name, ""), def, 0)
		return err
	}
	for _, err := range []error{
		count("BAE_MAX_SESSIONS_PER_KEY", &s.MaxSessionsPerKey, DefaultMaxSessionsPerKey),
		count("BAE_MAX_SESSIONS_PER_PROFILE", &s.MaxSessionsPerProfile, DefaultMaxSessionsPerProfile),
		count("BAE_MAX_SANDBOXES_PER_KEY", &s.MaxSandboxesPerKey, DefaultMaxSandboxesPerKey),
		count("BAE_MAX_SANDBOXES_PER_PROFILE", &s.MaxSandboxesPerProfile, DefaultMaxSandboxesPerProfile),
		count("BAE_MAX_STREAMS_PER_SESSION", &s.MaxStreamsPerSession, DefaultMaxStreamsPerSession),
		count("BAE_MAX_STREAMS_PER_KEY", &s.MaxStreamsPerKey, DefaultMaxStreamsPerKey),
		count("BAE_MAX_QUEUED_TURNS_PER_SESSION", &s.MaxQueuedTurnsPerSession, DefaultMaxQueuedTurnsPerSession),
		count("BAE_MAX_QUEUED_TURNS_PER_KEY", &s.MaxQueuedTurnsPerKey, DefaultMaxQueuedTurnsPerKey),
	} {
		if err != nil {
			return Server{}, err
		}
	}
	if s.SessionIdleTTL, err = parseTimeout("BAE_SESSION_IDLE_TTL", get("BAE_SESSION_IDLE_TTL", ""), DefaultSessionIdleTTL); err != nil {
		return Server{}, err
	}
	if s.SandboxSweepInterval, err = parseTimeout("BAE_SANDBOX_SWEEP_INTERVAL", get("BAE_SANDBOX_SWEEP_INTERVAL", ""), DefaultSandboxSweepInterval); err != nil {
		return Server{}, err
	}
	if s.MaxConcurrentOpens, err = parseCount("BAE_MAX_CONCURRENT_OPENS", get("BAE_MAX_CONCURRENT_OPENS", ""), 0, 1); err != nil {
		return Server{}, err
	}
	if s.WorkflowCacheSize, err = WorkflowCacheSizeFromEnv(lookup); err != nil {
		return Server{}, err
	}
	if s.Temporal, err = temporalConnFromEnv(get); err != nil {
		return Server{}, err
	}
	if s.Console, err = consoleFromEnv(get, s.DataDir); err != nil {
		return Server{}, err
	}
	s.MetricsAddr = get("BAE_METRICS_ADDR", "")
	s.Pprof = truthy(get("BAE_PPROF", ""))
	if s.MetricsAddr != "" && s.MetricsAddr != MetricsOnAdmin {
		if err := checkHostPort("BAE_METRICS_ADDR", s.MetricsAddr); err != nil {
			return Server{}, err
		}
	}
	if s.TemporalUIPort, err = parsePort("BAE_TEMPORAL_UI_PORT", get("BAE_TEMPORAL_UI_PORT", ""), DefaultTemporalUIPort); err != nil {
		return Server{}, err
	}
	if s.TemporalPort, err = parsePort("BAE_TEMPORAL_PORT", get("BAE_TEMPORAL_PORT", ""), DefaultTemporalPort); err != nil {
		return Server{}, err
	}
	return s, nil
}

// WorkflowCacheSizeFromEnv reads BAE_WORKFLOW_CACHE_SIZE on its own, for
// a process that must size the cache before it has the rest (an embedded
// Temporal's own workers create the process's cache when they start).
func WorkflowCacheSizeFromEnv(lookup func(string) (string, bool)) (int, error) {
	v, _ := lookup("BAE_WORKFLOW_CACHE_SIZE")
	return parseCount("BAE_WORKFLOW_CACHE_SIZE", strings.TrimSpace(v), DefaultWorkflowCacheSize, 1)
}

// parseCount reads a whole number no smaller than least; "" means def.
func parseCount(name, v string, def, least int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		return 0, invalidf("%s: %q is not a whole number of at least %d", name, v, least)
	}
	return n, nil
}

// IsLoopbackAddr reports whether host:port names a loopback host:
// "localhost", 127.0.0.0/8 or ::1. An empty host binds every interface and
// is therefore not loopback.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkHostPort(name, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return &ValidationError{Msg: fmt.Sprintf("%s: %q is not a valid host:port address", name, addr), Err: err}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return invalidf("%s: %q has an invalid port", name, addr)
	}
	return nil
}

// parseTimeout accepts whole seconds ("30", the documented form) or a Go
// duration ("500ms", so tests can use short timeouts).
func parseTimeout(name, v string, def time.Duration) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > int64(time.Duration(1<<63-1)/time.Second) {
			return 0, invalidf("%s: %q is out of range", name, v)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, invalidf("%s: %q is not a whole number of seconds or a duration like \"500ms\"", name, v)
	}
	return d, nil
}

func parsePort(name, v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 65535 {
		return 0, invalidf("%s: %q is not a valid port number", name, v)
	}
	return n, nil
}

// parseByteSize accepts a positive whole number of bytes.
func parseByteSize(name, v string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, invalidf("%s: %q is not a positive whole number of bytes", name, v)
	}
	return n, nil
}

func truthy(v string) bool {
	return v == "1" || strings.EqualFold(v, "true")
}

// falsy is truthy's opposite, for a switch that is on unless turned off.
func falsy(v string) bool {
	return v == "0" || strings.EqualFold(v, "false")
}

// ParseTrustedProxies reads a comma- or space-separated list of CIDR
// prefixes or bare addresses (a bare address is a one-address prefix).
// Empty is no trusted proxies.
func ParseTrustedProxies(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR prefix", f)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or CIDR prefix", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
