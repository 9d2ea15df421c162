// Package sandboxlimits is the one home of the default bounds of a sandbox
// container, shared by the server's remote sandboxes (internal/sandbox) and
// the Go SDK's local ones (sdk/tools.LocalSandbox). docs/operations.md
// ("Sandbox defaults") gives the reason for each.
package sandboxlimits

const (
	// MemoryMiB is the memory limit; swap is held to the same figure, so a
	// container gets no swap beyond it.
	MemoryMiB = 512
	// CPUs is the CPU quota, in cores.
	CPUs = 1.0
	// Pids bounds the container's process count.
	Pids = 256
	// Network is the network mode: loopback only.
	Network = "none"
)
