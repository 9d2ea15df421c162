package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/sdk"
)

func collect(t *testing.T, seq func(func(sdk.Event, error) bool)) ([]string, error) {
	t.Helper()
	var ids []string
	for e, err := range seq {
		if err != nil {
			return ids, err
		}
		ids = append(ids, e.ID)
	}
	return ids, nil
}

func TestSubscribeReconnectsAfterLag(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		require.Equal(t, "session.subscribe", c.Method)
		switch len(f.rpcCalls("session.subscribe")) {
		case 1:
			w.event(ev("evt_1", sdk.EventProviderRequest, ""))
			w.event(ev("evt_2", sdk.EventProviderResponse, ""))
			w.line(`{"jsonrpc":"2.0","error":{"code":-32000,"message":"lagged; reconnect with since_event_id"}}`)
		case 2:
			w.event(ev("evt_3", sdk.EventServerMessageSend, ""))
			// then the server ends the stream (unsubscribe / close)
		}
	}
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)
	ids, err := collect(t, s.Subscribe(context.Background(), sdk.SubscribeOptions{SinceEventID: "evt_0"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"evt_1", "evt_2", "evt_3"}, ids, "nothing lost, nothing repeated")

	subs := f.rpcCalls("session.subscribe")
	require.Len(t, subs, 2)
	assert.JSONEq(t, `{"since_event_id":"evt_0"}`, string(subs[0].Raw))
	assert.JSONEq(t, `{"since_event_id":"evt_2"}`, string(subs[1].Raw))
	assert.Equal(t, "evt_3", s.LastEventID())
}

func TestSubscribeWithoutSinceSendsEmptyParams(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) { w.event(ev("evt_1", sdk.EventSessionClose, "")) }
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)
	ids, err := collect(t, s.Subscribe(context.Background(), sdk.SubscribeOptions{}))
	require.NoError(t, err)
	assert.Equal(t, []string{"evt_1"}, ids)
	assert.JSONEq(t, `{}`, string(f.rpcCalls("session.subscribe")[0].Raw))
}

func TestSubscribeGivesUpOnLagWithoutProgress(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.line(`{"jsonrpc":"2.0","error":{"code":-32000,"message":"lagged; reconnect with since_event_id"}}`)
	}
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)
	_, err = collect(t, s.Subscribe(context.Background(), sdk.SubscribeOptions{}))
	assert.True(t, sdk.IsRPCCode(err, sdk.CodeApplicationError), "%v", err)
	assert.Len(t, f.rpcCalls("session.subscribe"), 3)
}

func TestSubscribeOtherErrorEnds(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) { w.fail(c, -32602, "Invalid params") }
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)
	_, err = collect(t, s.Subscribe(context.Background(), sdk.SubscribeOptions{}))
	assert.True(t, sdk.IsRPCCode(err, sdk.CodeInvalidParams))
	assert.Len(t, f.rpcCalls("session.subscribe"), 1)
}

func TestSubscribeBreakAndCancel(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.event(ev("evt_1", sdk.EventProviderRequest, ""))
		<-w.r.Context().Done() // live stream stays open
	}
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)

	// Breaking out of the loop ends the subscription without an error.
	for e, err := range s.Subscribe(context.Background(), sdk.SubscribeOptions{}) {
		require.NoError(t, err)
		assert.Equal(t, "evt_1", e.ID)
		break
	}

	// Cancelling the context yields ctx.Err() as the last element.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []error
	for _, err := range s.Subscribe(ctx, sdk.SubscribeOptions{}) {
		got = append(got, err)
		cancel()
	}
	require.Len(t, got, 2)
	assert.NoError(t, got[0])
	assert.ErrorIs(t, got[1], context.Canceled)
}

func TestUnsubscribe(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) { w.result(c, map[string]any{"unsubscribed": true}) }
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)
	require.NoError(t, s.Unsubscribe(context.Background()))
	assert.Len(t, f.rpcCalls("session.unsubscribe"), 1)
}

func TestEventsPaginatesAllPages(t *testing.T) {
	f := newFake(t)
	for i := range 5 {
		f.events = append(f.events, ev(fmt.Sprintf("evt_%d", i), sdk.EventProviderRequest, ""))
	}
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)
	ids, err := collect(t, s.Events(context.Background(), sdk.EventsQuery{Limit: 2}))
	require.NoError(t, err)
	assert.Equal(t, []string{"evt_0", "evt_1", "evt_2", "evt_3", "evt_4"}, ids)
	assert.Equal(t, []string{"", "2", "4"}, f.pages)

	page, err := s.EventsPage(context.Background(), sdk.EventsQuery{Cursor: "4", Limit: 2})
	require.NoError(t, err)
	assert.Len(t, page.Items, 1)
	assert.Empty(t, page.NextCursor)
}

func TestEventsStopsOnBreak(t *testing.T) {
	f := newFake(t)
	for i := range 5 {
		f.events = append(f.events, ev(fmt.Sprintf("evt_%d", i), sdk.EventProviderRequest, ""))
	}
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)
	for range s.Events(context.Background(), sdk.EventsQuery{Limit: 2}) {
		break
	}
	assert.Equal(t, []string{""}, f.pages, "no page fetched past the break")
}

func TestEventsProblemError(t *testing.T) {
	f := newFake(t)
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_wrong")
	require.NoError(t, err)
	f.rpc = nil
	_, err = collect(t, s.Subscribe(context.Background(), sdk.SubscribeOptions{}))
	assert.True(t, sdk.IsUnauthorized(err), "%v", err)
}

func TestEventDecode(t *testing.T) {
	e := ev("evt_1", sdk.EventSessionError, `{"reason":"driver_turn_abandoned","owner_client_key_id":"key_a"}`)
	var p sdk.SessionErrorPayload
	require.NoError(t, e.Decode(&p))
	assert.Equal(t, sdk.ReasonDriverTurnAbandoned, p.Reason)
	assert.Equal(t, "key_a", p.OwnerClientKeyID)
	assert.Equal(t, "session error (driver_turn_abandoned)", sdk.Describe(e))

	var m sdk.Message
	msg := ev("evt_2", sdk.EventClientMessageSend, `{"role":"user","content":"plain"}`)
	require.NoError(t, msg.Decode(&m))
	assert.Equal(t, "plain", m.Text())
	assert.Error(t, ev("evt_3", sdk.EventToolCall, `[]`).Decode(&p))

	var raw json.RawMessage
	require.NoError(t, msg.Decode(&raw))
}
