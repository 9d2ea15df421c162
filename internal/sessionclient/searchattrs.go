package sessionclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
)

const (
	// searchAttributesWait bounds how long startup waits for the frontend to
	// accept the custom search attributes. A real Temporal server on SQL
	// visibility learns a new attribute's alias when its namespace cache
	// next refreshes (every 10 s by default); each frontend host has its
	// own cache.
	searchAttributesWait = time.Minute
	// searchAttributesPoll is the pause between two probes.
	searchAttributesPoll = 250 * time.Millisecond
	// searchAttributesLogEvery spaces the "still waiting" lines.
	searchAttributesLogEvery = 5 * time.Second
)

// awaitSearchAttributes waits until the namespace's frontend resolves every
// custom search attribute, so that a session's first message, whose
// workflow start carries them, is not refused with "Namespace ... has no
// mapping defined for search attribute ...". The probe is a visibility
// count query naming each attribute: it resolves the aliases through the
// same namespace cache as a workflow start does, and stores nothing.
//
// It reports whether sessions should carry the attributes: false when they
// are still unknown after within (sessions then carry a memo only, as on a
// cluster that refused them), true once they resolve, and true as well when
// the probe itself is refused for another reason (a cluster without
// visibility queries for this client), which leaves the outcome to the
// first start as before.
func (e *Client) awaitSearchAttributes(ctx context.Context, namespace string, within time.Duration) bool {
	query := probeQuery()
	start := time.Now()
	deadline := start.Add(within)
	nextLog := start
	for {
		_, err := e.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: query})
		if err == nil {
			if waited := time.Since(start); waited > searchAttributesPoll {
				e.Log.Info("custom search attributes usable", "namespace", namespace, "waited", waited.Round(time.Millisecond))
			}
			return true
		}
		if !notYetKnown(err) {
			e.Log.Warn("cannot check the custom search attributes; assuming they are usable", "namespace", namespace, "err", err)
			return true
		}
		now := time.Now()
		if now.After(deadline) {
			e.Log.Warn("custom search attributes still unknown to the Temporal frontend; this replica's sessions will carry a memo only (restart it once the namespace cache has refreshed)",
				"namespace", namespace, "waited", within, "err", err)
			return false
		}
		if !now.Before(nextLog) {
			e.Log.Info("waiting for the Temporal frontend to know the custom search attributes (a new attribute is seen when the namespace cache refreshes)",
				"namespace", namespace, "waited", now.Sub(start).Round(time.Second), "limit", within, "err", err)
			nextLog = now.Add(searchAttributesLogEvery)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(searchAttributesPoll):
		}
	}
}

// probeQuery names every custom attribute, in a stable order.
func probeQuery() string {
	names := make([]string, 0, len(SearchAttributes))
	for name := range SearchAttributes {
		names = append(names, name)
	}
	slices.Sort(names)
	terms := make([]string, len(names))
	for i, name := range names {
		terms[i] = fmt.Sprintf("%s = 'probe'", name)
	}
	return strings.Join(terms, " AND ")
}

// notYetKnown is the frontend refusing the query because an attribute is
// not (yet) mapped, or being briefly unavailable.
func notYetKnown(err error) bool {
	var invalid *serviceerror.InvalidArgument
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	return errors.As(err, &invalid) || errors.As(err, &unavailable) || errors.As(err, &deadline)
}
