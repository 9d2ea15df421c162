package config

import (
	"time"

	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/sandbox"
)

// Redacted replaces every secret-bearing value in admin views. It has a
// fixed length so a secret's length never leaks.
const Redacted = "••••••••"

// MCPServerSummary is one item of GET /admin/v1/mcp-servers.
type MCPServerSummary struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
}

// ProviderSummary is one item of GET /admin/v1/providers; it never carries
// the auth token.
type ProviderSummary struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	BaseURL  string `json:"base_url"`
	// ModelSettings are the entry's model_settings, header values but the
	// beta lists masked; absent when it has none.
	ModelSettings *provider.Settings `json:"model_settings,omitempty"`
}

// shownSettings is an entry's settings as views show them (nil: none).
func shownSettings(s provider.Settings) *provider.Settings {
	if s.IsZero() {
		return nil
	}
	v := s.Shown()
	return &v
}

// ConfigSnapshot is the body of GET /admin/v1/config.
type ConfigSnapshot struct {
	MCP       MCPSnapshot       `json:"mcp"`
	Providers ProvidersSnapshot `json:"providers"`
	Telemetry TelemetrySnapshot `json:"telemetry"`
	Sandbox   SandboxSnapshot   `json:"sandbox"`
}

// SandboxSnapshot is the effective [sandbox] bound (defaults included),
// before any profile's overrides.
type SandboxSnapshot struct {
	MemoryMiB       int64    `json:"memory_mib"`
	CPUs            float64  `json:"cpus"`
	Pids            int64    `json:"pids"`
	CapAdd          []string `json:"cap_add"`
	NoNewPrivileges bool     `json:"no_new_privileges"`
	User            string   `json:"user"`
	Network         string   `json:"network"`
	ExecTimeoutSecs int64    `json:"exec_timeout_secs"`
}

// MCPSnapshot is the "mcp" object of ConfigSnapshot.
type MCPSnapshot struct {
	Servers []MCPServerSnapshot `json:"servers"`
}

// MCPServerSnapshot shows an MCP server with its url redacted (RedactURL),
// its args as configured but for credentials (DisplayArgs), and every
// header value and env value masked.
type MCPServerSnapshot struct {
	Name      string            `json:"name"`
	Transport string            `json:"transport"`
	Command   *string           `json:"command"`
	Args      []string          `json:"args"`
	URL       *string           `json:"url"`
	Headers   map[string]string `json:"headers"`
	Env       map[string]string `json:"env,omitempty"` // only when set: bae-go's extension
}

// ProvidersSnapshot is the "providers" object of ConfigSnapshot.
type ProvidersSnapshot struct {
	Entries []ProviderSnapshot `json:"entries"`
}

// ProviderSnapshot is a provider entry with its auth token masked.
type ProviderSnapshot struct {
	Name      string `json:"name"`
	Provider  string `json:"provider"`
	Model     string `json:"model"`
	BaseURL   string `json:"base_url"`
	AuthToken string `json:"auth_token"`
	// ModelSettings as ProviderSummary shows them.
	ModelSettings *provider.Settings `json:"model_settings,omitempty"`
}

// TelemetrySnapshot mirrors [telemetry] with otlp_headers values masked.
type TelemetrySnapshot struct {
	Enabled      bool              `json:"enabled"`
	OTLPEndpoint *string           `json:"otlp_endpoint"`
	OTLPHeaders  map[string]string `json:"otlp_headers"`
	SampleRatio  float64           `json:"sample_ratio"`
	ServiceName  string            `json:"service_name"`
	Traces       EnabledSnapshot   `json:"traces"`
	Metrics      MetricsSnapshot   `json:"metrics"`
}

// EnabledSnapshot is {"enabled": bool}.
type EnabledSnapshot struct {
	Enabled bool `json:"enabled"`
}

// MetricsSnapshot is the "metrics" object of TelemetrySnapshot.
type MetricsSnapshot struct {
	Enabled  bool     `json:"enabled"`
	Disabled []string `json:"disabled"`
}

// MCPServersView lists MCP servers by name with only name and transport:
// command, args, url and headers may carry secrets.
func (f *File) MCPServersView() []MCPServerSummary {
	servers := f.SortedMCPServers()
	out := make([]MCPServerSummary, 0, len(servers))
	for _, s := range servers {
		out = append(out, MCPServerSummary{Name: s.Name, Transport: s.Transport})
	}
	return out
}

// ProvidersView lists providers by name with their effective base URL.
func (f *File) ProvidersView() []ProviderSummary {
	entries := f.SortedProviders()
	out := make([]ProviderSummary, 0, len(entries))
	for _, p := range entries {
		out = append(out, ProviderSummary{Name: p.Name, Provider: p.Kind, Model: p.Model, BaseURL: p.DisplayBaseURL(), ModelSettings: shownSettings(p.Settings)})
	}
	return out
}

// ConfigView is the full startup snapshot as the config file writes it
// (${VAR} tokens unresolved), with every secret-bearing value (MCP header
// and env values, auth tokens, OTLP header values) masked regardless of its
// content, so a literal secret cannot slip through, every URL redacted
// (RedactURL) and MCP args shown as configured but for what looks like a
// credential (DisplayArgs). Keys, and how many args, are kept.
func (f *File) ConfigView() ConfigSnapshot {
	snap := ConfigSnapshot{
		MCP:       MCPSnapshot{Servers: []MCPServerSnapshot{}},
		Providers: ProvidersSnapshot{Entries: []ProviderSnapshot{}},
	}
	for _, s := range f.SortedMCPServers() {
		snap.MCP.Servers = append(snap.MCP.Servers, MCPServerSnapshot{
			Name: s.Name, Transport: s.Transport,
			Command: nullIfEmpty(s.Command), Args: DisplayArgs(s.Args), URL: nullIfEmpty(RedactURL(s.URL)),
			Headers: redactValues(s.Headers), Env: redactValues(s.Env),
		})
	}
	for _, p := range f.SortedProviders() {
		snap.Providers.Entries = append(snap.Providers.Entries, ProviderSnapshot{
			Name: p.Name, Provider: p.Kind, Model: p.Model,
			BaseURL: p.DisplayBaseURL(), AuthToken: Redacted, ModelSettings: shownSettings(p.Settings),
		})
	}
	t := f.TelemetryConfig()
	disabled := t.Metrics.Disabled
	if disabled == nil {
		disabled = []string{}
	}
	snap.Telemetry = TelemetrySnapshot{
		Enabled:      t.Enabled,
		OTLPEndpoint: nullIfEmpty(RedactURL(t.OTLPEndpoint)),
		OTLPHeaders:  redactValues(t.OTLPHeaders),
		SampleRatio:  t.SampleRatio,
		ServiceName:  t.EffectiveServiceName(),
		Traces:       EnabledSnapshot{Enabled: t.Traces.Enabled},
		Metrics:      MetricsSnapshot{Enabled: t.Metrics.Enabled, Disabled: disabled},
	}
	sb := f.SandboxPolicy(sandbox.Settings{})
	snap.Sandbox = SandboxSnapshot{
		MemoryMiB: sb.MemoryMiB, CPUs: sb.CPUs, Pids: sb.Pids, CapAdd: append([]string{}, sb.CapAdd...),
		NoNewPrivileges: !sb.AllowNewPrivileges, User: sb.User, Network: sb.Network,
		ExecTimeoutSecs: int64(sb.ExecTimeout / time.Second),
	}
	return snap
}

// redactValues keeps the keys and masks every value, empty ones included,
// so "set but empty" looks like "set". encoding/json sorts map keys.
func redactValues(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = Redacted
	}
	return out
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
