package sdk

import (
	"context"
	"errors"
	"io"
	"iter"
)

// SubscribeOptions configures Subscribe.
type SubscribeOptions struct {
	// SinceEventID replays the persisted events after this id before the
	// live stream; "" starts at the current moment.
	SinceEventID string
}

// maxIdleLags bounds reconnects that delivered nothing: a server lagging
// over and over without progress is reported rather than retried forever.
const maxIdleLags = 3

// Subscribe observes the session's live events (session.subscribe). The
// sequence ends when the stream ends — session.unsubscribe from any
// connection, or the session closing — or when the loop breaks. A failure,
// including ctx cancellation, is yielded once as the last element.
//
// When the server reports the subscriber lagged, Subscribe reconnects with
// since_event_id set to the last event it yielded, so the sequence neither
// skips nor repeats events. (A lag before the first event, without
// SinceEventID, resumes from the live tail: there is no id to resume from.)
func (s *Session) Subscribe(ctx context.Context, opts SubscribeOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		since := opts.SinceEventID
		idle := 0
		for {
			delivered, lagged, err := s.subscribeOnce(ctx, since, func(e Event) bool {
				since = e.ID
				s.noteEvent(e.ID)
				return yield(e, nil)
			})
			switch {
			case err != nil:
				yield(Event{}, err)
				return
			case !lagged:
				return
			}
			if delivered {
				idle = 0
			} else if idle++; idle >= maxIdleLags {
				yield(Event{}, &RPCError{Code: CodeApplicationError, Message: "lagged; reconnecting made no progress"})
				return
			}
			s.Logger().DebugContext(ctx, "bae: subscription lagged; reconnecting", "session_id", s.ID, "since_event_id", since)
		}
	}
}

// subscribeOnce runs one session.subscribe stream. lagged reports the
// server's request to reconnect.
func (s *Session) subscribeOnce(ctx context.Context, since string, emit func(Event) bool) (delivered, lagged bool, err error) {
	params := map[string]string{}
	if since != "" {
		params["since_event_id"] = since
	}
	st, err := s.t.openRPC(ctx, s.ID, s.key, rpcRequest{JSONRPC: "2.0", ID: s.rpcID.Add(1), Method: "session.subscribe", Params: params}, s.approvalHeader(nil))
	if err != nil {
		return false, false, err
	}
	defer st.close()
	for {
		f, err := st.next()
		if errors.Is(err, io.EOF) {
			return delivered, false, nil
		}
		if err != nil {
			return delivered, false, err
		}
		if f.Error != nil {
			if !f.terminal() && isLagged(f.Error) {
				return delivered, true, nil
			}
			return delivered, false, f.Error
		}
		if f.terminal() {
			return delivered, false, nil
		}
		if handled, err := s.onApprovalFrame(ctx, f); handled {
			if err != nil {
				return delivered, false, err
			}
			continue
		}
		ev, ok, err := f.event()
		if err != nil {
			return delivered, false, err
		}
		if !ok {
			continue
		}
		delivered = true
		if !emit(ev) {
			return delivered, false, nil
		}
	}
}

// Unsubscribe ends every active Subscribe stream of the session, from any
// connection (session.unsubscribe).
func (s *Session) Unsubscribe(ctx context.Context) error {
	return s.call(ctx, "session.unsubscribe", struct{}{}, nil)
}
