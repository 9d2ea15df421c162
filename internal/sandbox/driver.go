// Package sandbox runs the server-side ("remote") sandboxes of BAE sessions:
// long-lived containers a session's agent execs shell commands into.
//
// The pieces are:
//   - Driver, the container-engine surface (DockerDriver implements it);
//   - Provisioner, the in-memory, per-profile image status that feeds the
//     session.sandbox.available event and GET /admin/v1/sandbox-status;
//   - Reap, the startup sweep removing containers of sessions that closed
//     while the server was down;
//   - test support (BuildBusyboxImage, RemoveImage, EngineAvailable) for
//     tests that need a real image on a machine that cannot pull one.
package sandbox

import (
	"context"
	"io"
)

// Labels the server puts on every sandbox container it starts, so that a
// later server process can find (and reap) containers it no longer tracks.
const (
	// LabelSession carries the id of the session owning the container.
	LabelSession = "bae.session"
	// LabelManaged marks a container as started by a BAE server.
	LabelManaged = "bae.managed"
	// LabelDeployment names the database a container belongs to.
	LabelDeployment = "bae.deployment"
	// ManagedFilter is the List filter selecting every managed container.
	ManagedFilter = LabelManaged + "=true"
)

// Handle identifies a started sandbox container.
type Handle struct {
	ID    string
	Image string
}

// ExecResult is the captured outcome of one command. A non-zero ExitCode is a
// successful exec of a failing command, not a driver error.
type ExecResult struct {
	Stdout   string
	Stderr   string
	ExitCode int
	// Truncated reports that stdout and/or stderr exceeded the driver's
	// output cap; the capped stream ends with an "[output truncated: …]" line.
	Truncated bool
}

// Container is one sandbox container as reported by Driver.List.
type Container struct {
	ID     string
	Image  string
	Labels map[string]string
}

// Driver is a container engine able to host sandboxes. One driver is chosen
// server-wide; the per-profile available_sandboxes list is the image
// allowlist enforced on top of it by the caller.
type Driver interface {
	// EnsureImage makes image present locally: inspect, pull on a miss.
	EnsureImage(ctx context.Context, image string) error
	// Start runs a long-lived, idle container from image carrying labels.
	// The image must already be present (see EnsureImage).
	Start(ctx context.Context, image string, labels map[string]string) (Handle, error)
	// Exec runs `sh -c command` in container id, feeding stdin when non-nil
	// (subagent prompts) and capturing bounded output.
	Exec(ctx context.Context, id, command string, stdin io.Reader) (ExecResult, error)
	// Stop stops and removes container id. Stopping a container that is
	// already gone succeeds.
	Stop(ctx context.Context, id string) error
	// List returns the containers matching the label filter labelKey, which
	// is either "key" (label present) or "key=value".
	List(ctx context.Context, labelKey string) ([]Container, error)
}
