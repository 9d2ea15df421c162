package wire

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Admin API bodies, the one definition the server writes and the console
// and baectl read.

// Bounds on admin-supplied fields (and on rows `baesrv import` carries
// over, which must fit what the API would have stored).
const (
	MaxNameBytes     = 256  // names and ids
	MaxListItemBytes = 512  // one list entry (an image reference is the longest)
	MaxListItems     = 1000 // entries per list
	// MaxClientVersionBytes bounds the free-form client_version.
	MaxClientVersionBytes = 1024
)

// Profile is a profile as the admin API shows it.
type Profile struct {
	ID                 string   `json:"id"`
	Name               string   `json:"name"`
	PrimaryProvider    string   `json:"primary_provider"`
	FallbackProviders  []string `json:"fallback_providers"`
	MCPServers         []string `json:"mcp_servers"`
	AllowedTools       []string `json:"allowed_tools"`
	AvailableSandboxes []string `json:"available_sandboxes"`
	// Sandbox is the profile's overrides of the server's [sandbox] bounds.
	Sandbox json.RawMessage `json:"sandbox"`
	// Context is the profile's compaction policy, defaults filled in.
	Context json.RawMessage `json:"context"`
	// Approvals is the profile's approval policy, defaults filled in;
	// absent when it has none.
	Approvals json.RawMessage `json:"approvals,omitempty"`
	CreatedAt string          `json:"created_at"`
	UpdatedAt string          `json:"updated_at"`
}

// ClientKey is a client key as the admin API lists it. Key, the plaintext,
// is in the creation answer only.
type ClientKey struct {
	ID         string  `json:"id"`
	Name       string  `json:"name"`
	Key        string  `json:"key,omitempty"`
	Prefix     string  `json:"prefix"`
	ProfileID  string  `json:"profile_id"`
	CreatedAt  string  `json:"created_at"`
	LastUsedAt *string `json:"last_used_at"`
}

// SandboxStatus is one profile's sandbox image provisioning status.
type SandboxStatus struct {
	ProfileID string        `json:"profile_id"`
	Images    []ImageStatus `json:"images"`
}

// ImageStatus is one image's provisioning status.
type ImageStatus struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// Warning is something the admin API stored as asked but the operator
// should know about; Type is a stable slug, Detail says what happens next.
// Answers carry "warnings" only when there is one, so a BAE tool sees
// BAE's shape otherwise.
type Warning struct {
	Type   string `json:"type"`
	Detail string `json:"detail"`
}

// Warning types.
const (
	// WarnPrimaryProviderUnavailable: the profile's primary provider is not
	// in the registry; sessions on it are refused (422
	// primary_provider_unavailable) until it is added.
	WarnPrimaryProviderUnavailable = "primary_provider_unavailable"
	// WarnFallbackProviderUnavailable: a fallback is not in the registry;
	// turns skip it.
	WarnFallbackProviderUnavailable = "fallback_provider_unavailable"
)

// ProfileWarnings names the providers a profile refers to that the
// registry (configured, by name) does not hold. The admin API answers them
// on create and replace; the console shows them on the profile pages.
func ProfileWarnings(configured []string, primary string, fallbacks []string) []Warning {
	known := make(map[string]bool, len(configured))
	for _, n := range configured {
		known[n] = true
	}
	registry := "none: bae-config.toml has no [[providers.entries]]"
	if len(configured) > 0 {
		registry = "configured: " + strings.Join(configured, ", ")
	}
	var out []Warning
	if !known[primary] {
		out = append(out, Warning{Type: WarnPrimaryProviderUnavailable, Detail: fmt.Sprintf(
			"primary_provider %q is not in the provider registry (%s); sessions on this profile are refused with 422 primary_provider_unavailable until it is added",
			primary, registry)})
	}
	seen := map[string]bool{}
	for _, f := range fallbacks {
		if known[f] || seen[f] {
			continue
		}
		seen[f] = true
		out = append(out, Warning{Type: WarnFallbackProviderUnavailable, Detail: fmt.Sprintf(
			"fallback provider %q is not in the provider registry (%s); turns skip it", f, registry)})
	}
	return out
}
