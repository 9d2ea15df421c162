package sandbox

import (
	"context"
	"errors"
	"fmt"
)

// SessionState is what the database says about the session a container is
// labelled with, as Reap's caller reports it.
type SessionState int

const (
	// SessionOpen: the session is open; its container is kept.
	SessionOpen SessionState = iota
	// SessionEnded: the session exists and is no longer open.
	SessionEnded
	// SessionUnknown: the database has no such session (it was deleted,
	// or the database was restored from a backup older than the session).
	SessionUnknown
)

// ReapReason says why Reap removed a container; the values are metric
// attribute values and log fields.
type ReapReason string

const (
	ReapSessionEnded   ReapReason = "session_ended"
	ReapSessionUnknown ReapReason = "session_unknown"
	ReapNoSession      ReapReason = "no_session"
)

// ReapReasons are every ReapReason.
func ReapReasons() []ReapReason {
	return []ReapReason{ReapSessionEnded, ReapSessionUnknown, ReapNoSession}
}

// Reaped is one container Reap removed.
type Reaped struct {
	Container
	Reason ReapReason
}

// Reap stops and removes the managed sandbox containers (bae.managed=true)
// of deployment whose bae.session is not an open session according to
// state: its session ended, the database does not know it, or it has no
// session label. Sandbox handles live in the database, not in the engine,
// so a container whose session ended while no server could stop it (its
// server was killed, or its stop failed) would otherwise run forever.
//
// Only containers labelled bae.deployment=deployment are looked at, so
// servers backed by different databases can share one engine without ever
// touching each other's containers; an empty deployment is refused. When
// state fails for a session its container is kept (never remove what might
// be in use). The failures are returned joined, with the containers removed.
func Reap(ctx context.Context, d Driver, deployment string, state func(ctx context.Context, sessionID string) (SessionState, error)) ([]Reaped, error) {
	if deployment == "" {
		// Without it every deployment's containers would be swept.
		return nil, errors.New("reap sandboxes: no deployment id")
	}
	containers, err := d.List(ctx, LabelDeployment+"="+deployment)
	if err != nil {
		return nil, fmt.Errorf("reap sandboxes: %w", err)
	}
	// Several containers may share a session; ask once per session.
	known := make(map[string]SessionState)
	var reaped []Reaped
	var errs []error
	for _, c := range containers {
		if c.Labels[LabelManaged] != "true" || c.Labels[LabelDeployment] != deployment {
			continue
		}
		reason := ReapNoSession
		if sid := c.Labels[LabelSession]; sid != "" {
			st, asked := known[sid]
			if !asked {
				var qerr error
				st, qerr = state(ctx, sid)
				if qerr != nil {
					errs = append(errs, fmt.Errorf("reap sandbox %s: session %s: %w", c.ID, sid, qerr))
					continue
				}
				known[sid] = st
			}
			switch st {
			case SessionEnded:
				reason = ReapSessionEnded
			case SessionUnknown:
				reason = ReapSessionUnknown
			default:
				continue
			}
		}
		if serr := d.Stop(ctx, c.ID); serr != nil {
			errs = append(errs, fmt.Errorf("reap sandbox %s: %w", c.ID, serr))
			continue
		}
		reaped = append(reaped, Reaped{Container: c, Reason: reason})
	}
	return reaped, errors.Join(errs...)
}
