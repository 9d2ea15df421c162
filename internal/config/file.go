// Package config holds the server's two configuration inputs: the BAE_*
// environment variables (env.go) and the optional bae-config.toml file with
// the MCP server registry, the LLM provider registry and the telemetry
// section (this file). Both are read once at startup; problems an operator
// must fix are reported as *ValidationError so the binary exits with code 2.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/sandbox"
)

// ValidationError is an operator authoring/usage error: a bad BAE_* value or
// a config file that exists but is wrong. Callers map it to exit code 2.
type ValidationError struct {
	Msg string
	Err error // optional underlying cause
}

func (e *ValidationError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *ValidationError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) *ValidationError {
	return &ValidationError{Msg: fmt.Sprintf(format, args...)}
}

// MCP transports accepted in [[mcp.servers]].transport.
const (
	TransportStdio = "stdio"
	TransportSSE   = "sse"
	TransportHTTP  = "http"
)

// DefaultServiceName is the OTel service.name used when [telemetry] omits it.
const DefaultServiceName = "baesrv"

// File is the parsed, validated bae-config.toml. Build it with LoadFile or
// Parse: those fill telemetry defaults, which a bare File{} lacks.
type File struct {
	MCP       MCPSection
	Providers ProvidersSection
	Telemetry Telemetry
	// Sandbox is the bound of every remote sandbox: the defaults with
	// [sandbox] applied; a profile's "sandbox" object applies on top.
	Sandbox sandbox.Policy
}

// MCPSection is [mcp]. Servers keep file order.
type MCPSection struct {
	Servers []MCPServer
}

// MCPServer is one [[mcp.servers]] entry. Header and env values keep their
// raw ${VAR} tokens; they are resolved only at connect time.
type MCPServer struct {
	Name      string
	Transport string // "stdio" | "sse" | "http"
	Command   string
	Args      []string
	URL       string
	Headers   map[string]string
	// Env is added to a stdio server's otherwise minimal environment
	// (bae-go's extension; the way to hand it a secret).
	Env map[string]string
}

// ProvidersSection is [providers]. Entries keep file order.
type ProvidersSection struct {
	Entries []ProviderEntry
}

// ProviderEntry is one [[providers.entries]] entry. AuthToken is the raw
// template (e.g. "${ANTHROPIC_API_KEY}"), resolved only at call time.
type ProviderEntry struct {
	Name      string
	Kind      string // "anthropic" | "openai"
	BaseURL   string // as written; may be empty
	Model     string
	AuthToken string
	MaxTokens int
	// NoStream turns streaming off for this provider (stream = false):
	// its answers then arrive whole and no deltas are sent.
	NoStream bool
	// NoPromptCache turns prompt caching off (prompt_cache = false): no
	// cache_control breakpoints (anthropic) and no prompt_cache_key
	// (openai), for gateways that reject them.
	NoPromptCache bool
	// ContextWindow is the model's window in tokens: as written, else the
	// model family's default (compaction.ContextWindow).
	ContextWindow int
	// Price turns the entry's usage into cost (nil: no price, cost 0).
	Price *Price
	// Settings are model_settings: what the request carries besides the
	// model and max_tokens (validated against Kind, Model and MaxTokens;
	// a profile may override them).
	Settings provider.Settings
}

// Budget is how many input tokens a request to this entry may carry: the
// context window minus the output reserve.
func (p ProviderEntry) Budget() int {
	maxTokens := p.MaxTokens
	if maxTokens <= 0 {
		maxTokens = provider.DefaultMaxTokens
	}
	return compaction.Budget(p.ContextWindow, maxTokens)
}

// EffectiveSettings are the entry's model settings with a profile's
// overrides (its stored model_settings) for this entry laid over them,
// validated together: the config file may have changed since the profile
// was written.
func (p ProviderEntry) EffectiveSettings(profile json.RawMessage) (provider.Settings, error) {
	s := p.Settings
	if len(profile) > 0 {
		over, err := provider.ParseOverrides(profile)
		if err != nil {
			return provider.Settings{}, fmt.Errorf("profile model_settings: %w", err)
		}
		if o, ok := over[p.Name]; ok {
			s = s.Merge(o)
		}
	}
	if err := s.Validate(p.Kind, p.Model, p.MaxTokens); err != nil {
		return provider.Settings{}, fmt.Errorf("model_settings.%w", err)
	}
	return s, nil
}

// ResolveHeaders is s with the ${VAR} tokens of its headers' values
// resolved with lookup. An unset variable or an unterminated token is a
// *provider.SettingError naming the header and the variable, never a
// value. The result is for one call: callers must not store, log or send
// it anywhere but the provider (the settings stored, shown and recorded
// keep the tokens).
func ResolveHeaders(s provider.Settings, lookup func(string) (string, bool)) (provider.Settings, error) {
	if len(s.Headers) == 0 {
		return s, nil
	}
	names := make([]string, 0, len(s.Headers))
	for k := range s.Headers {
		names = append(names, k)
	}
	slices.Sort(names) // the same header named first every time
	out := make(map[string]string, len(s.Headers))
	for _, k := range names {
		v, err := ResolveEnvTokens(s.Headers[k], lookup)
		if err != nil {
			return provider.Settings{}, &provider.SettingError{Field: "headers", Reason: fmt.Sprintf("header %q: %v", k, err)}
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return provider.Settings{}, &provider.SettingError{Field: "headers", Reason: fmt.Sprintf("header %q: its value resolves to a control character", k)}
		}
		out[k] = v
	}
	s.Headers = out
	return s, nil
}

// EffectiveBaseURL is BaseURL verbatim when set, else the kind's SaaS host.
// Both defaults are bare hosts; callers append the versioned path.
func (p ProviderEntry) EffectiveBaseURL() string {
	if p.BaseURL != "" {
		return p.BaseURL
	}
	return provider.DefaultBaseURL(p.Kind)
}

// Telemetry is [telemetry]. Every field but Enabled is inert while Enabled
// is false, and is then not validated either, so a parked config can stay.
type Telemetry struct {
	Enabled      bool
	OTLPEndpoint string
	OTLPHeaders  map[string]string // raw ${VAR} tokens
	SampleRatio  float64
	ServiceName  string // as written; see EffectiveServiceName
	Traces       TracesSettings
	Metrics      MetricsSettings
}

// TracesSettings is [telemetry.traces].
type TracesSettings struct {
	Enabled bool
}

// MetricsSettings is [telemetry.metrics].
type MetricsSettings struct {
	Enabled  bool
	Disabled []string
}

// DefaultTelemetry is the configuration an absent [telemetry] table means.
func DefaultTelemetry() Telemetry {
	return Telemetry{
		SampleRatio: 1.0,
		Traces:      TracesSettings{Enabled: true},
		Metrics:     MetricsSettings{Enabled: true},
	}
}

// EffectiveServiceName is ServiceName, or "baesrv" when unset.
func (t Telemetry) EffectiveServiceName() string {
	if t.ServiceName == "" {
		return DefaultServiceName
	}
	return t.ServiceName
}

// MetricNames returns the closed set of instrument names that
// [telemetry.metrics].disabled may reference.
func MetricNames() []string {
	return []string{
		"bae.sessions.open", "bae.sessions.total", "bae.events.total",
		"bae.profiles.count", "bae.keys.count", "bae.mcp.sessions.live",
		"bae.turns.pending", "bae.sandboxes.live", "bae.subagents.active",
		"bae.drivers.registered", "bae.turns.completed", "bae.provider.requests",
		"bae.provider.latency", "bae.tool.calls", "bae.tool.latency",
		"bae.sandboxes.reaped",
		"bae.provider.tokens", "bae.provider.cost",
		"bae.approvals.pending", "bae.approval.wait",
	}
}

// LoadFile reads bae-config.toml at path, resolving telemetry header tokens
// against the process environment. See LoadFileWithEnv.
func LoadFile(path string) (*File, error) {
	return LoadFileWithEnv(path, os.LookupEnv)
}

// LoadFileWithEnv reads and validates the file at path. An empty path yields
// an empty File and no error (nothing is available unless configured). A
// named file that does not exist is a *ValidationError, like any other read,
// parse or validation failure: a mistyped path must not start a server with
// empty registries.
func LoadFileWithEnv(path string, lookup func(string) (string, bool)) (*File, error) {
	if path == "" {
		return &File{Telemetry: DefaultTelemetry(), Sandbox: sandbox.Policy{}.Resolved()}, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, invalidf("config file %q does not exist", path)
	}
	if err != nil {
		return nil, &ValidationError{Msg: fmt.Sprintf("cannot read config file %q", path), Err: err}
	}
	f, err := Parse(data, lookup)
	if err != nil {
		return nil, fmt.Errorf("config file %q: %w", path, err)
	}
	return f, nil
}

// The raw* types mirror the TOML shape with pointers where absence matters
// (defaults, required fields); Parse converts them into the public types.
type rawFile struct {
	MCP       *rawMCP           `toml:"mcp"`
	Providers *rawProviders     `toml:"providers"`
	Telemetry *rawTelemetry     `toml:"telemetry"`
	Sandbox   *sandbox.Settings `toml:"sandbox"`
}

type rawMCP struct {
	Servers []rawMCPServer `toml:"servers"`
}

type rawMCPServer struct {
	Name      string            `toml:"name"`
	Transport string            `toml:"transport"`
	Command   string            `toml:"command"`
	Args      []string          `toml:"args"`
	URL       string            `toml:"url"`
	Headers   map[string]string `toml:"headers"`
	Env       map[string]string `toml:"env"`
}

type rawProviders struct {
	Entries []rawProvider `toml:"entries"`
}

type rawProvider struct {
	Name      string  `toml:"name"`
	Provider  string  `toml:"provider"`
	BaseURL   string  `toml:"base_url"`
	Model     *string `toml:"model"`
	AuthToken *string `toml:"auth_token"`
	MaxTokens *int64  `toml:"max_tokens"`
	Stream    *bool   `toml:"stream"`
	// PromptCache is prompt_cache: provider-side prompt caching (default on).
	PromptCache *bool `toml:"prompt_cache"`
	// ContextWindow is the model's context window in tokens.
	ContextWindow *int64 `toml:"context_window"`
	Price         *Price `toml:"price"`
	// ModelSettings is model_settings; unknown keys in it are refused.
	ModelSettings *provider.Settings `toml:"model_settings"`
}

type rawTelemetry struct {
	Enabled      bool              `toml:"enabled"`
	OTLPEndpoint string            `toml:"otlp_endpoint"`
	OTLPHeaders  map[string]string `toml:"otlp_headers"`
	SampleRatio  *float64          `toml:"sample_ratio"`
	ServiceName  string            `toml:"service_name"`
	Traces       *struct {
		Enabled *bool `toml:"enabled"`
	} `toml:"traces"`
	Metrics *struct {
		Enabled  *bool    `toml:"enabled"`
		Disabled []string `toml:"disabled"`
	} `toml:"metrics"`
}

// Parse decodes and validates bae-config.toml contents. lookup resolves
// ${VAR} tokens in telemetry otlp_headers, which must be resolvable at
// startup when telemetry is enabled, and checks those of providers'
// model_settings headers, which must be resolvable at startup and are
// resolved again at each call (MCP headers and provider tokens are
// resolved only at use).
func Parse(data []byte, lookup func(string) (string, bool)) (*File, error) {
	var raw rawFile
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		return nil, &ValidationError{Msg: "invalid TOML", Err: err}
	}
	if err := checkUnknownKeys(md.Undecoded()); err != nil {
		return nil, err
	}
	f := &File{}
	if raw.MCP != nil {
		if f.MCP, err = buildMCP(raw.MCP.Servers); err != nil {
			return nil, err
		}
	}
	if raw.Providers != nil {
		if f.Providers, err = buildProviders(raw.Providers.Entries, lookup); err != nil {
			return nil, err
		}
	}
	if f.Telemetry, err = buildTelemetry(raw.Telemetry, lookup); err != nil {
		return nil, err
	}
	if f.Sandbox, err = buildSandbox(raw.Sandbox); err != nil {
		return nil, err
	}
	return f, nil
}

func buildSandbox(raw *sandbox.Settings) (sandbox.Policy, error) {
	p := sandbox.Policy{}.Resolved()
	if raw == nil {
		return p, nil
	}
	s, err := raw.Normalize()
	if err != nil {
		return sandbox.Policy{}, invalidf("[sandbox] %s", err)
	}
	return p.Apply(s), nil
}

// SandboxPolicy is the bound of a sandbox started for a profile with the
// given overrides (already validated when the profile was written).
func (f *File) SandboxPolicy(profile sandbox.Settings) sandbox.Policy {
	base := sandbox.Policy{}
	if f != nil {
		base = f.Sandbox
	}
	return base.Apply(profile).Resolved()
}

// checkUnknownKeys rejects typos inside the known sections while ignoring
// unknown top-level keys (forward compatibility). Provider entries tolerate
// extra keys, as the reference schema does, except inside model_settings
// (what reaches the provider is never a silent guess) and a model setting
// written beside the entry's keys instead of in its model_settings.
func checkUnknownKeys(keys []toml.Key) error {
	for _, k := range keys {
		if len(k) < 2 {
			continue
		}
		switch k[0] {
		case "mcp", "telemetry", "sandbox":
		case "providers":
			if k[1] == "entries" {
				if len(k) >= 4 && k[2] == "model_settings" {
					return invalidf("unknown model setting %q in [providers.entries.model_settings] (known: %s)", strings.Join(k[3:], "."), strings.Join(provider.SettingKeys, ", "))
				}
				if len(k) == 3 && slices.Contains(provider.SettingKeys, k[2]) {
					return invalidf("%q is a model setting: put it in the entry's model_settings table", k[2])
				}
				continue
			}
		default:
			continue
		}
		return invalidf("unknown field %q in [%s]", k.String(), k[0])
	}
	return nil
}

func buildMCP(servers []rawMCPServer) (MCPSection, error) {
	out := MCPSection{Servers: make([]MCPServer, 0, len(servers))}
	seen := make(map[string]bool, len(servers))
	for _, s := range servers {
		if strings.TrimSpace(s.Name) == "" {
			return MCPSection{}, invalidf("an [[mcp.servers]] entry has an empty name")
		}
		switch s.Transport {
		case TransportStdio:
			if strings.TrimSpace(s.Command) == "" {
				return MCPSection{}, invalidf("MCP server %q uses transport %q but is missing required field \"command\"", s.Name, s.Transport)
			}
		case TransportSSE, TransportHTTP:
			if strings.TrimSpace(s.URL) == "" {
				return MCPSection{}, invalidf("MCP server %q uses transport %q but is missing required field \"url\"", s.Name, s.Transport)
			}
		case "":
			return MCPSection{}, invalidf("MCP server %q is missing required field \"transport\"", s.Name)
		default:
			return MCPSection{}, invalidf("MCP server %q has unsupported transport %q (expected \"stdio\", \"sse\" or \"http\")", s.Name, s.Transport)
		}
		if seen[s.Name] {
			return MCPSection{}, invalidf("duplicate MCP server name %q in [mcp.servers]", s.Name)
		}
		seen[s.Name] = true
		if s.Args == nil {
			s.Args = []string{}
		}
		if s.Headers == nil {
			s.Headers = map[string]string{}
		}
		if len(s.Env) > 0 && s.Transport != TransportStdio {
			return MCPSection{}, invalidf("MCP server %q sets \"env\", which only a stdio server has", s.Name)
		}
		for k := range s.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return MCPSection{}, invalidf("MCP server %q has an invalid env name %q", s.Name, k)
			}
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		out.Servers = append(out.Servers, MCPServer(s))
	}
	return out, nil
}

func buildProviders(entries []rawProvider, lookup func(string) (string, bool)) (ProvidersSection, error) {
	out := ProvidersSection{Entries: make([]ProviderEntry, 0, len(entries))}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		if strings.TrimSpace(e.Name) == "" {
			return ProvidersSection{}, invalidf("a [[providers.entries]] entry has an empty name")
		}
		if provider.DefaultBaseURL(e.Provider) == "" {
			return ProvidersSection{}, invalidf("provider %q has unsupported provider kind %q (expected \"anthropic\" or \"openai\")", e.Name, e.Provider)
		}
		if e.Model == nil {
			return ProvidersSection{}, invalidf("provider %q is missing required field \"model\"", e.Name)
		}
		if e.AuthToken == nil {
			return ProvidersSection{}, invalidf("provider %q is missing required field \"auth_token\"", e.Name)
		}
		maxTokens := int64(provider.DefaultMaxTokens)
		if e.MaxTokens != nil {
			maxTokens = *e.MaxTokens
		}
		if maxTokens < 0 || maxTokens > 1<<32-1 {
			return ProvidersSection{}, invalidf("provider %q has out-of-range max_tokens %d", e.Name, maxTokens)
		}
		window := int64(compaction.ContextWindow(*e.Model))
		if e.ContextWindow != nil {
			window = *e.ContextWindow
		}
		if window < 1024 || window > 1<<31-1 {
			return ProvidersSection{}, invalidf("provider %q has out-of-range context_window %d (at least 1024 tokens)", e.Name, window)
		}
		if window <= maxTokens {
			return ProvidersSection{}, invalidf("provider %q has context_window %d not larger than max_tokens %d", e.Name, window, maxTokens)
		}
		if seen[e.Name] {
			return ProvidersSection{}, invalidf("duplicate provider name %q in [providers.entries]", e.Name)
		}
		if err := checkPrice(e.Name, e.Price); err != nil {
			return ProvidersSection{}, err
		}
		var settings provider.Settings
		if e.ModelSettings != nil {
			settings = *e.ModelSettings
			if err := settings.Validate(e.Provider, *e.Model, int(maxTokens)); err != nil {
				return ProvidersSection{}, invalidf("provider %q has an invalid model_settings.%s", e.Name, err)
			}
			if _, err := ResolveHeaders(settings, lookup); err != nil {
				return ProvidersSection{}, invalidf("provider %q has an invalid model_settings.%s", e.Name, err)
			}
		}
		seen[e.Name] = true
		out.Entries = append(out.Entries, ProviderEntry{
			Name: e.Name, Kind: e.Provider, BaseURL: e.BaseURL,
			Model: *e.Model, AuthToken: *e.AuthToken, MaxTokens: int(maxTokens), ContextWindow: int(window),
			NoStream: e.Stream != nil && !*e.Stream, Price: e.Price,
			NoPromptCache: e.PromptCache != nil && !*e.PromptCache, Settings: settings,
		})
	}
	return out, nil
}

func buildTelemetry(raw *rawTelemetry, lookup func(string) (string, bool)) (Telemetry, error) {
	t := DefaultTelemetry()
	if raw == nil {
		return t, nil
	}
	t.Enabled = raw.Enabled
	t.OTLPEndpoint = raw.OTLPEndpoint
	t.OTLPHeaders = raw.OTLPHeaders
	t.ServiceName = raw.ServiceName
	if raw.SampleRatio != nil {
		t.SampleRatio = *raw.SampleRatio
	}
	if raw.Traces != nil && raw.Traces.Enabled != nil {
		t.Traces.Enabled = *raw.Traces.Enabled
	}
	if raw.Metrics != nil {
		if raw.Metrics.Enabled != nil {
			t.Metrics.Enabled = *raw.Metrics.Enabled
		}
		t.Metrics.Disabled = raw.Metrics.Disabled
	}
	if !t.Enabled {
		return t, nil
	}
	if err := t.validate(lookup); err != nil {
		return Telemetry{}, err
	}
	return t, nil
}

func (t Telemetry) validate(lookup func(string) (string, bool)) error {
	if strings.TrimSpace(t.OTLPEndpoint) == "" {
		return invalidf("[telemetry] enabled = true requires a non-empty otlp_endpoint")
	}
	u, err := url.Parse(t.OTLPEndpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalidf("[telemetry] otlp_endpoint %q must be a valid http:// or https:// URL", t.OTLPEndpoint)
	}
	// Written so NaN fails too.
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		return invalidf("[telemetry] sample_ratio %v must be between 0.0 and 1.0", t.SampleRatio)
	}
	known := MetricNames()
	for _, name := range t.Metrics.Disabled {
		if !slices.Contains(known, name) {
			return invalidf("[telemetry.metrics] disabled contains unknown metric %q", name)
		}
	}
	if _, err := t.ResolveOTLPHeaders(lookup); err != nil {
		return &ValidationError{Msg: "[telemetry] otlp_headers", Err: err}
	}
	return nil
}

// ResolveOTLPHeaders returns otlp_headers with ${VAR} tokens resolved and
// every name and value checked as a valid HTTP header. Errors name the
// header but never include a value.
func (t Telemetry) ResolveOTLPHeaders(lookup func(string) (string, bool)) (map[string]string, error) {
	out := make(map[string]string, len(t.OTLPHeaders))
	names := make([]string, 0, len(t.OTLPHeaders))
	for name := range t.OTLPHeaders {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic error reporting
	for _, name := range names {
		if !provider.ValidHeaderName(name) {
			return nil, fmt.Errorf("invalid header name %q", name)
		}
		value, err := ResolveEnvTokens(t.OTLPHeaders[name], lookup)
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", name, err)
		}
		if !validHeaderValue(value) {
			return nil, fmt.Errorf("header %q has an invalid value", name)
		}
		out[name] = value
	}
	return out, nil
}

// validHeaderValue accepts visible ASCII, space and tab: what the OTLP/gRPC
// metadata layer will send without rejecting.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\t' && (c < 0x20 || c > 0x7e) {
			return false
		}
	}
	return true
}

// Provider returns the provider entry registered under name.
func (f *File) Provider(name string) (ProviderEntry, bool) {
	if f == nil {
		return ProviderEntry{}, false
	}
	for _, p := range f.Providers.Entries {
		if p.Name == name {
			return p, true
		}
	}
	return ProviderEntry{}, false
}

// MCPServer returns the MCP server registered under name.
func (f *File) MCPServer(name string) (MCPServer, bool) {
	if f == nil {
		return MCPServer{}, false
	}
	for _, s := range f.MCP.Servers {
		if s.Name == name {
			return s, true
		}
	}
	return MCPServer{}, false
}

// SortedMCPServers returns a copy of the MCP servers sorted by name.
func (f *File) SortedMCPServers() []MCPServer {
	if f == nil {
		return []MCPServer{}
	}
	out := slices.Clone(f.MCP.Servers)
	if out == nil {
		out = []MCPServer{}
	}
	slices.SortFunc(out, func(a, b MCPServer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// SortedProviders returns a copy of the provider entries sorted by name.
func (f *File) SortedProviders() []ProviderEntry {
	if f == nil {
		return []ProviderEntry{}
	}
	out := slices.Clone(f.Providers.Entries)
	if out == nil {
		out = []ProviderEntry{}
	}
	slices.SortFunc(out, func(a, b ProviderEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// TelemetryConfig returns the telemetry settings, defaults for a nil File.
func (f *File) TelemetryConfig() Telemetry {
	if f == nil {
		return DefaultTelemetry()
	}
	return f.Telemetry
}
