package sandbox

import (
	"context"
	"errors"
	"fmt"
)

// Reap stops and removes every managed sandbox container (label
// bae.managed=true) whose bae.session is not an open session according to
// isOpen. It is meant for server start-up: sandbox handles live only in
// memory, so containers of sessions closed while the server was down would
// otherwise run forever.
//
// A managed container without a session label belongs to no session and is
// removed too. When isOpen fails for a session its container is kept (never
// remove what might be in use); the failures are returned joined, together
// with the number of containers removed.
//
// deployment scopes the sweep to containers labelled bae.deployment with
// that value, so servers backed by different databases can share one
// engine; "" sweeps every managed container.
func Reap(ctx context.Context, d Driver, deployment string, isOpen func(ctx context.Context, sessionID string) (bool, error)) (removed int, err error) {
	filter := ManagedFilter
	if deployment != "" {
		filter = LabelDeployment + "=" + deployment
	}
	containers, err := d.List(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("reap sandboxes: %w", err)
	}
	// Several containers may share a session; ask once per session.
	open := make(map[string]bool)
	var errs []error
	for _, c := range containers {
		sid := c.Labels[LabelSession]
		if sid != "" {
			keep, asked := open[sid]
			if !asked {
				var qerr error
				keep, qerr = isOpen(ctx, sid)
				if qerr != nil {
					errs = append(errs, fmt.Errorf("reap sandbox %s: session %s: %w", c.ID, sid, qerr))
					continue
				}
				open[sid] = keep
			}
			if keep {
				continue
			}
		}
		if serr := d.Stop(ctx, c.ID); serr != nil {
			errs = append(errs, fmt.Errorf("reap sandbox %s: %w", c.ID, serr))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
