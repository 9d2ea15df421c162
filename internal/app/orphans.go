package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// Orphan sweep timing: a stored message whose turn has not begun after
// orphanAge is resubmitted. Live submissions are accepted within
// milliseconds, and a resubmission of one still alive is deduplicated by
// its update id, so the sweep never doubles a turn.
const (
	orphanAge      = 5 * time.Second
	orphanInterval = 5 * time.Second
)

// sweepOrphans resubmits messages whose SendMessage update was lost because
// the server that stored them died before the workflow accepted it. It runs
// on every replica until ctx ends.
func sweepOrphans(ctx context.Context, st *store.Store, eng *sessionclient.Client, log *slog.Logger) {
	t := time.NewTicker(orphanInterval)
	defer t.Stop()
	for {
		orphans, err := st.OrphanTurns(ctx, orphanAge, 100)
		if err != nil && ctx.Err() == nil {
			log.Debug("orphan turn sweep", "err", err)
		}
		for _, o := range orphans {
			in := workflows.SendMessageInput{TurnID: o.TurnID, ClientKeyID: o.ClientKeyID}
			err := eng.ResubmitTurn(ctx, workflows.SessionRef{ID: o.SessionID, ProfileID: o.ProfileID}, in)
			if err != nil {
				log.Warn("could not resubmit a stored message", "session_id", o.SessionID, "turn_id", o.TurnID, "err", err)
				continue
			}
			log.Info("resubmitted a stored message whose turn never began", "session_id", o.SessionID, "turn_id", o.TurnID)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
