// Package sandbox runs the server-side ("remote") sandboxes of BAE sessions:
// long-lived containers a session's agent execs shell commands into.
//
// The pieces are:
//   - Driver, the container-engine surface (DockerDriver implements it),
//     with containers bounded by a Policy (policy.go) and commands that run
//     at most once per exec id (ExecOnce, execrecord.go);
//   - Provisioner, the in-memory, per-profile image status that feeds the
//     session.sandbox.available event and GET /admin/v1/sandbox-status;
//   - Reap, the sweep (at start and periodically) removing the containers
//     of this deployment whose session is not open;
//   - test support (BuildBusyboxImage, RemoveTestImage, EngineAvailable)
//     for tests that need a real image on a machine that cannot pull one.
package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
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
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	// Truncated reports that stdout and/or stderr exceeded the driver's
	// output cap; the capped stream ends with an "[output truncated: …]" line.
	Truncated bool `json:"truncated,omitempty"`
	// TimedOut reports that the command ran past its timeout and was killed
	// (ExitCode is then the killed shell's, usually 137).
	TimedOut bool `json:"timed_out,omitempty"`
	// Collected reports that an earlier call with the same exec id started
	// the command and this call only collected its outcome.
	Collected bool `json:"-"`
	// Timeout is the limit that applied (ExecOnce).
	Timeout time.Duration `json:"-"`
}

// ExecRequest is one command run at most once per exec id (ExecOnce).
type ExecRequest struct {
	// ID names the run inside the container: 1 to 100 of [A-Za-z0-9_-].
	// Callers derive it from what identifies the side effect (a tool call,
	// a subagent), so every retry of that side effect carries the same id.
	ID      string
	Command string
	// Stdin is fed to the command when this call starts it.
	Stdin io.Reader
	// Timeout kills the command once it has run this long (0: no limit).
	// It is enforced inside the container, so it holds with no server
	// watching.
	Timeout time.Duration
}

// ErrExecLost reports a recorded exec whose run stopped without recording
// an outcome (its processes were killed from outside, or the container was
// restarted): whether the command completed is unknown, so it is not run
// again.
var ErrExecLost = errors.New("the earlier run of this command stopped without recording its outcome")

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
	// Start runs a long-lived, idle container from image carrying labels,
	// bounded by policy (the zero Policy means every default). The image
	// must already be present (see EnsureImage).
	Start(ctx context.Context, image string, labels map[string]string, policy Policy) (Handle, error)
	// Exec runs `sh -c command` in container id, feeding stdin when non-nil
	// and capturing bounded output. When ctx ends first the command is
	// killed. For interactive use: a caller that may retry uses ExecOnce.
	Exec(ctx context.Context, id, command string, stdin io.Reader) (ExecResult, error)
	// ExecOnce runs req.Command in container id at most once per req.ID:
	// the first call claims the id and starts it; any later call with the
	// same id (a retry after a crash) waits for that run and returns its
	// recorded outcome instead of starting another. When ctx ends first,
	// ExecOnce returns ctx's error and leaves the command running, so that
	// a retry can collect it; CancelExec kills it.
	ExecOnce(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	// CancelExec kills the processes of the recorded exec execID; its record
	// then completes with the killed command's exit code.
	CancelExec(ctx context.Context, id, execID string) error
	// ReleaseExec drops the recorded output of exec execID once the caller
	// has stored its outcome. The claim stays, so the id never runs again.
	ReleaseExec(ctx context.Context, id, execID string) error
	// Stop stops and removes container id. Stopping a container that is
	// already gone succeeds.
	Stop(ctx context.Context, id string) error
	// List returns the containers matching the label filter labelKey, which
	// is either "key" (label present) or "key=value".
	List(ctx context.Context, labelKey string) ([]Container, error)
}
