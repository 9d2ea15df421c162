package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// userMessage is the message a driver sent.
type userMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func idem(turnID, step string) string { return turnID + "/" + step }

func rejected(why workflows.Rejection, detail string) workflows.BeginTurnResult {
	return workflows.BeginTurnResult{Outcome: workflows.OutcomeRejected, Rejection: why, Detail: detail}
}

// BeginTurn records the driver's message (merged with a paused turn's
// results when resuming), re-checks the session and its profile, and returns
// the provider walk. Its outcome is stored with the turn input, so a re-run
// returns the first run's answer.
func (a *Activities) BeginTurn(ctx context.Context, in workflows.BeginTurnInput) (workflows.BeginTurnResult, error) {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	var res workflows.BeginTurnResult
	err := a.Store.Tx(ctx, func(tx *store.Tx) error {
		var (
			evs []store.NewEvent
			err error
		)
		if res, evs, err = a.beginInTx(ctx, tx, in); err != nil || len(evs) == 0 {
			return err
		}
		_, err = tx.AppendEvents(ctx, in.SessionID, evs...)
		return err
	})
	return res, err
}

// beginInTx is BeginTurn inside a caller's transaction, except that the
// events of a turn that began (its client.message.send and client tool
// results) are returned for the caller to append, so that they can share
// one append with what the caller stores next.
func (a *Activities) beginInTx(ctx context.Context, tx *store.Tx, in workflows.BeginTurnInput) (workflows.BeginTurnResult, []store.NewEvent, error) {
	// Every read in one round trip; the locks are taken in order.
	bi, err := tx.BeginInputs(ctx, in.TurnID, in.SessionID, in.ClientKeyID)
	if err != nil {
		return workflows.BeginTurnResult{}, nil, err
	}
	if errors.Is(bi.InputErr, store.ErrNotFound) {
		return rejected(workflows.RejectTurnInputMissing, ""), nil, nil
	}
	var res workflows.BeginTurnResult
	if len(bi.Input.BeginResult) > 0 {
		err := json.Unmarshal(bi.Input.BeginResult, &res)
		return res, nil, err
	}
	res, evs, err := a.beginTx(ctx, tx, in, bi)
	if err != nil || res.Outcome == workflows.OutcomeHandedBack {
		return res, nil, err // handed back: nothing stored, it begins later
	}
	return res, evs, tx.SetBeginResult(in.TurnID, res)
}

func (a *Activities) beginTx(ctx context.Context, tx *store.Tx, in workflows.BeginTurnInput, bi store.BeginInputs) (workflows.BeginTurnResult, []store.NewEvent, error) {
	sid, cid, turn := in.SessionID, in.ClientKeyID, in.TurnID
	ti := bi.Input
	// A message queued by a key revoked since never runs. (The key row was
	// locked before the session row, in the order a revocation takes them.)
	if !bi.KeyLive {
		return rejected(workflows.RejectClientKeyRevoked, ""), nil, nil
	}
	pending, state := bi.Pending, bi.State
	if state != store.StateOpen {
		r := rejected(workflows.RejectSessionNotOpen, state)
		r.SessionEnded = true
		return r, nil, nil
	}
	var msg userMessage
	if err := json.Unmarshal(ti.Message, &msg); err != nil {
		return rejected(workflows.RejectInvalidMessage, ""), nil, nil
	}
	if msg.Role == "" {
		msg.Role = "user"
	}
	content := msg.Content
	serverIDs := map[string]bool{}
	if pending == nil && in.HandBack && (bi.Tail == nil || !bi.Tail.Answered()) {
		// The conversation ends unanswered: a turn that began and has not
		// ended, whose workflow task was lost, runs first, instead of
		// being taken out of the conversation (and then superseded).
		begun, err := tx.BegunUnended(ctx, sid, turn)
		if err != nil {
			return workflows.BeginTurnResult{}, nil, err
		}
		if len(begun) > 0 {
			r := workflows.BeginTurnResult{Outcome: workflows.OutcomeHandedBack}
			for _, u := range begun {
				r.Ahead = append(r.Ahead, workflows.AheadTurn{TurnID: u.TurnID, ClientKeyID: u.ClientKeyID, Arrived: u.Arrived})
			}
			a.logger(ctx, turn).Warn("turns begun and not ended handed back to run first", "turns", r.Ahead)
			return r, nil, nil
		}
	}
	if pending == nil && hasToolResult(content) {
		// No provider accepts a tool_result that answers no tool_use: stored,
		// it would fail this turn and every later one.
		return rejected(workflows.RejectNoPausedTurn, ""), nil, nil
	}
	if pending == nil {
		// Only a paused turn may leave the conversation mid-exchange; any
		// other unfinished tail is a turn that died past every retry.
		removed, err := tx.RepairConversationFrom(ctx, sid, bi.Tail)
		if err != nil {
			return workflows.BeginTurnResult{}, nil, err
		}
		if len(removed) > 0 {
			a.logger(ctx, turn).Warn("unfinished turns taken out of the conversation", "turns", removed)
		}
	}

	if pending != nil {
		toolUses := decodeBlocks(pending.ToolUses)
		server := decodeBlocks(pending.ServerResults)
		for _, b := range server {
			serverIDs[strField(b, "tool_use_id")] = true
		}
		abandon := pending.Owner != cid
		if abandon && hasToolResult(content) {
			// Another client's tool_result answers none of this pause's
			// calls: a result for a pause of its own that another
			// driver's message abandoned while it was queued. It cannot
			// replace this pause (cancelAbandoned would end the session):
			// refused as a tool_result with no pause, nothing stored.
			return rejected(workflows.RejectNoPausedTurn, ""), nil, nil
		}
		if abandon {
			if _, err := tx.AppendEvents(ctx, sid, store.NewEvent{
				IdemKey: idem(turn, "abandoned"), ClientKeyID: pending.Owner,
				Payload: events.SessionErrorPayload{Reason: events.ReasonDriverTurnAbandoned, OwnerClientKeyID: pending.Owner},
			}); err != nil {
				return workflows.BeginTurnResult{}, nil, err
			}
		}
		var merged []block
		var merr error
		switch {
		case msg.Role != "user":
			merr = fmt.Errorf("paused tool continuation must have role \"user\", got %q", msg.Role)
		case abandon || isVoluntaryAbandonment(content):
			merged, merr = cancelAbandoned(toolUses, server, content)
		default:
			merged, merr = mergeToolResults(toolUses, server, content)
		}
		if err := tx.SetPendingTurn(ctx, sid, nil); err != nil {
			return workflows.BeginTurnResult{}, nil, err
		}
		if merr != nil {
			if _, err := tx.AppendEvents(ctx, sid, store.NewEvent{
				IdemKey: idem(turn, "merge_invalid"), TurnID: turn, ClientKeyID: cid,
				Payload: events.SessionErrorPayload{Reason: events.ReasonToolResultMergeInvalid, Detail: merr.Error()},
			}); err != nil {
				return workflows.BeginTurnResult{}, nil, err
			}
			if _, err := tx.EndSession(ctx, sid, store.StateError); err != nil {
				return workflows.BeginTurnResult{}, nil, err
			}
			r := rejected(workflows.RejectMergeInvalid, merr.Error())
			r.SessionEnded = true
			return r, nil, nil
		}
		var err error
		if content, err = json.Marshal(merged); err != nil {
			return workflows.BeginTurnResult{}, nil, fmt.Errorf("marshal merged content: %w", err)
		}
	}

	evs := []store.NewEvent{{
		IdemKey: idem(turn, "cms"), TurnID: turn, ClientKeyID: cid,
		Payload: events.ClientMessage{Role: msg.Role, Content: content},
	}}
	if arr, ok := blocksOf(content); ok {
		for i, b := range arr {
			if blockType(b) != "tool_result" || serverIDs[strField(b, "tool_use_id")] {
				continue
			}
			isErr, _ := b["is_error"].(bool)
			evs = append(evs, store.NewEvent{
				IdemKey: idem(turn, fmt.Sprintf("tr/%d", i)), TurnID: turn, ClientKeyID: cid,
				Payload: events.ToolResultPayload{ToolUseID: strField(b, "tool_use_id"), Dispatch: events.DispatchClient, IsError: isErr, Content: b["content"]},
			})
		}
	}
	tx.AppendMessage(sid, idem(turn, "user"), msg.Role, content)

	// Read with the rest, inside the transaction: with every pool
	// connection held by a BeginTurn, a second connection would never come.
	sess, profile, err := bi.Session, bi.Profile, bi.ProfileErr
	if errors.Is(err, store.ErrNotFound) {
		return a.endInTx(ctx, tx, in.TurnRef, evs, "profile_unavailable", events.SessionErrorPayload{Reason: events.ReasonProfileUnavailable, ProfileID: sess.ProfileID},
			rejected(workflows.RejectProfileUnavailable, ""))
	}
	if err != nil {
		return workflows.BeginTurnResult{}, nil, err
	}
	if _, ok := a.Config.Provider(profile.PrimaryProvider); !ok {
		a.logger(ctx, turn).Error("profile's primary provider not found in bae-config.toml", "profile_id", profile.ID, "primary_provider", profile.PrimaryProvider)
		return a.endInTx(ctx, tx, in.TurnRef, evs, "provider_config", events.SessionErrorPayload{
			Reason: events.ReasonProviderConfig, Detail: fmt.Sprintf("primary provider %q is not configured in bae-config.toml", profile.PrimaryProvider),
		}, workflows.BeginTurnResult{Outcome: workflows.OutcomeProvidersFailed})
	}
	primary, _ := a.Config.Provider(profile.PrimaryProvider)
	providers, models := []string{profile.PrimaryProvider}, []string{primary.Model}
	for _, name := range profile.FallbackProviders {
		e, ok := a.Config.Provider(name)
		if !ok {
			a.logger(ctx, turn).Error("fallback provider not found in bae-config.toml; skipping", "profile_id", profile.ID, "provider", name)
			continue
		}
		providers, models = append(providers, name), append(models, e.Model)
	}
	return workflows.BeginTurnResult{Providers: providers, Models: models, ProfileName: profile.Name, Approvals: len(profile.Approvals) > 0}, evs, nil
}

// endInTx records the turn's events, before, and a session.error, and
// moves the session to error.
func (a *Activities) endInTx(ctx context.Context, tx *store.Tx, ref workflows.TurnRef, before []store.NewEvent, step string, payload events.SessionErrorPayload, res workflows.BeginTurnResult) (workflows.BeginTurnResult, []store.NewEvent, error) {
	if _, err := tx.AppendEvents(ctx, ref.SessionID, append(before, store.NewEvent{
		IdemKey: idem(ref.TurnID, step), TurnID: ref.TurnID, ClientKeyID: ref.ClientKeyID, Payload: payload,
	})...); err != nil {
		return workflows.BeginTurnResult{}, nil, err
	}
	if _, err := tx.EndSession(ctx, ref.SessionID, store.StateError); err != nil {
		return workflows.BeginTurnResult{}, nil, err
	}
	res.SessionEnded = true
	return res, nil, nil
}

func hasToolResult(content json.RawMessage) bool {
	arr, _ := blocksOf(content)
	for _, b := range arr {
		if blockType(b) == "tool_result" {
			return true
		}
	}
	return false
}

func decodeBlocks(raws []json.RawMessage) []block {
	out := make([]block, 0, len(raws))
	for _, r := range raws {
		var b block
		if json.Unmarshal(r, &b) == nil {
			out = append(out, b)
		}
	}
	return out
}
