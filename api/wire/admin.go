package wire

import "encoding/json"

// Admin API bodies, the one definition the server writes and the console
// and baectl read.

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
	Context   json.RawMessage `json:"context"`
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
