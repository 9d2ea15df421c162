package sandbox

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/bae-go/bae-go/sandboxlimits"
)

// Defaults of a sandbox container's bounds, shared with the Go SDK's local
// sandbox; docs/operations.md ("Sandbox defaults") gives the reason for each.
const (
	DefaultMemoryMiB   = sandboxlimits.MemoryMiB
	DefaultCPUs        = sandboxlimits.CPUs
	DefaultPids        = sandboxlimits.Pids
	DefaultNetwork     = sandboxlimits.Network
	DefaultExecTimeout = 120 * time.Second
	// MaxExecTimeout keeps an exec inside the 5-minute bound of the tool
	// activity that runs it, with room for the kill and the database steps.
	MaxExecTimeout = 4 * time.Minute
)

// Bounds accepted for the settings, so that a typo cannot produce a
// container the engine refuses at every start, or one without bounds.
const (
	minMemoryMiB = 16      // the exec wrapper and a shell need a few MiB
	maxMemoryMiB = 1 << 20 // 1 TiB
	minCPUs      = 0.01    // the engine's own minimum
	maxCPUs      = 1024
	minPids      = 32 // the exec wrapper uses about a dozen processes
	maxPids      = 1 << 22
)

// Policy is the effective bound of one sandbox container and its execs.
// The zero Policy means every default (see Resolved): a caller that forgets
// to pass one gets a bounded container, never an unbounded one.
type Policy struct {
	MemoryMiB int64
	CPUs      float64
	Pids      int64
	// CapAdd is added back after dropping every capability.
	CapAdd []string
	// AllowNewPrivileges turns no-new-privileges off (setuid binaries such
	// as sudo then work).
	AllowNewPrivileges bool
	// User runs the keep-alive and every exec ("" keeps the image's user).
	User string
	// Network is the container's network mode: "none", "bridge" or the name
	// of a user-defined network.
	Network string
	// ExecTimeout kills an Auto-mode or RPC exec that runs longer.
	ExecTimeout time.Duration
}

// Resolved returns p with every unset field at its default.
func (p Policy) Resolved() Policy {
	if p.MemoryMiB <= 0 {
		p.MemoryMiB = DefaultMemoryMiB
	}
	if !(p.CPUs > 0) {
		p.CPUs = DefaultCPUs
	}
	if p.Pids <= 0 {
		p.Pids = DefaultPids
	}
	if p.Network == "" {
		p.Network = DefaultNetwork
	}
	if p.ExecTimeout <= 0 {
		p.ExecTimeout = DefaultExecTimeout
	}
	return p
}

// Settings is the operator-facing form of a Policy: the [sandbox] section of
// bae-config.toml and a profile's "sandbox" object. Every field is
// optional; a set field overrides the layer below (defaults, then the file,
// then the profile).
type Settings struct {
	MemoryMiB       *int64    `json:"memory_mib,omitempty" toml:"memory_mib"`
	CPUs            *float64  `json:"cpus,omitempty" toml:"cpus"`
	Pids            *int64    `json:"pids,omitempty" toml:"pids"`
	CapAdd          *[]string `json:"cap_add,omitempty" toml:"cap_add"`
	NoNewPrivileges *bool     `json:"no_new_privileges,omitempty" toml:"no_new_privileges"`
	User            *string   `json:"user,omitempty" toml:"user"`
	Network         *string   `json:"network,omitempty" toml:"network"`
	ExecTimeoutSecs *int64    `json:"exec_timeout_secs,omitempty" toml:"exec_timeout_secs"`
}

// SettingsError names the setting that is out of range.
type SettingsError struct {
	Field string
	Msg   string
}

func (e *SettingsError) Error() string { return e.Field + " " + e.Msg }

var (
	userPattern    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$`)
	networkPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
)

// capabilities are the Linux capability names (without CAP_) cap_add
// accepts.
var capabilities = []string{
	"AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
	"CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER",
	"FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE",
	"MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE",
	"NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP",
	"SETUID", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE", "SYS_NICE",
	"SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME",
	"SYS_TTY_CONFIG", "SYSLOG", "WAKE_ALARM",
}

// Normalize validates s and returns it with capability names in canonical
// form (upper case, no CAP_ prefix, no duplicates). Errors are
// *SettingsError.
func (s Settings) Normalize() (Settings, error) {
	bad := func(field, format string, args ...any) (Settings, error) {
		return Settings{}, &SettingsError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if v := s.MemoryMiB; v != nil && (*v < minMemoryMiB || *v > maxMemoryMiB) {
		return bad("memory_mib", "must be between %d and %d (MiB), got %d", minMemoryMiB, maxMemoryMiB, *v)
	}
	// Written so that NaN fails too.
	if v := s.CPUs; v != nil && !(*v >= minCPUs && *v <= maxCPUs) {
		return bad("cpus", "must be between %v and %v, got %v", minCPUs, maxCPUs, *v)
	}
	if v := s.Pids; v != nil && (*v < minPids || *v > maxPids) {
		return bad("pids", "must be between %d and %d, got %d", minPids, maxPids, *v)
	}
	if s.CapAdd != nil {
		caps := make([]string, 0, len(*s.CapAdd))
		for _, c := range *s.CapAdd {
			name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(c)), "CAP_")
			if name == "ALL" {
				return bad("cap_add", "must list capabilities one by one; ALL would undo dropping them")
			}
			if !slices.Contains(capabilities, name) {
				return bad("cap_add", "contains %q, which is not a Linux capability", c)
			}
			if !slices.Contains(caps, name) {
				caps = append(caps, name)
			}
		}
		s.CapAdd = &caps
	}
	if v := s.User; v != nil && *v != "" && !userPattern.MatchString(*v) {
		return bad("user", "must be a user name or uid, optionally with :group or :gid, got %q", *v)
	}
	if v := s.Network; v != nil {
		switch {
		case *v == "host":
			return bad("network", "must not be \"host\": it would share the host's network stack")
		case !networkPattern.MatchString(*v):
			return bad("network", "must be \"none\", \"bridge\" or the name of a user-defined network, got %q", *v)
		}
	}
	if v := s.ExecTimeoutSecs; v != nil && (*v < 1 || *v > int64(MaxExecTimeout/time.Second)) {
		return bad("exec_timeout_secs", "must be between 1 and %d, got %d", int64(MaxExecTimeout/time.Second), *v)
	}
	return s, nil
}

// Apply returns p with every field s sets overridden. s must be normalized.
func (p Policy) Apply(s Settings) Policy {
	if s.MemoryMiB != nil {
		p.MemoryMiB = *s.MemoryMiB
	}
	if s.CPUs != nil {
		p.CPUs = *s.CPUs
	}
	if s.Pids != nil {
		p.Pids = *s.Pids
	}
	if s.CapAdd != nil {
		p.CapAdd = slices.Clone(*s.CapAdd)
	}
	if s.NoNewPrivileges != nil {
		p.AllowNewPrivileges = !*s.NoNewPrivileges
	}
	if s.User != nil {
		p.User = *s.User
	}
	if s.Network != nil {
		p.Network = *s.Network
	}
	if s.ExecTimeoutSecs != nil {
		p.ExecTimeout = time.Duration(*s.ExecTimeoutSecs) * time.Second
	}
	return p
}

// nanoCPUs converts a CPU count into the engine's unit.
func nanoCPUs(cpus float64) (int64, error) {
	n := math.Round(cpus * 1e9)
	if !(n >= 1e7) || n > 1e15 {
		return 0, errors.New("cpu limit out of range")
	}
	return int64(n), nil
}
