package sessiontools

import (
	"fmt"

	"github.com/bae-go/bae-go/store"
)

// Refusal says why a session tool call was refused. Only api/ turns it
// into the client's JSON-RPC error.
type Refusal string

// Why a session tool call is refused.
const (
	RefuseUnknownMethod         Refusal = "unknown_method"
	RefuseInvalidParams         Refusal = "invalid_params"
	RefuseSessionNotOpen        Refusal = "session_not_open" // Detail: the state
	RefuseProfileUnavailable    Refusal = "profile_unavailable"
	RefuseImageNotAllowed       Refusal = "sandbox_image_not_allowed" // Detail: the image
	RefuseSandboxAlreadyRunning Refusal = "sandbox_already_running"
	RefuseSandboxStartFailed    Refusal = "sandbox_start_failed" // Detail: why
	RefuseSandboxNotRunning     Refusal = "sandbox_not_running"
	RefuseSandboxStopFailed     Refusal = "sandbox_stop_failed" // Detail: why
	RefuseSandboxExecFailed     Refusal = "sandbox_exec_failed" // Detail: why
	RefuseSubagentNotFound      Refusal = "subagent_not_found"  // Detail: the id
	RefuseQuotaExceeded         Refusal = "quota_exceeded"      // Quota: the cap
	RefuseClientKeyRevoked      Refusal = "client_key_revoked"
)

// RefusedError is a refused call: what and, per Refusal, a detail.
type RefusedError struct {
	Refusal Refusal
	Detail  string
	// Quota is the cap reached, for RefuseQuotaExceeded.
	Quota *store.QuotaError
}

func (e *RefusedError) Error() string {
	if e.Detail == "" {
		return string(e.Refusal)
	}
	return fmt.Sprintf("%s: %s", e.Refusal, e.Detail)
}

func refuse(r Refusal, detail string) error { return &RefusedError{Refusal: r, Detail: detail} }
