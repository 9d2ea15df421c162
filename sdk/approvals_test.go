package sdk_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/sdk"
)

const approvalRequestLine = `{"jsonrpc":"2.0","method":"session.approvalRequest","params":{"approval_id":"apr_1","turn_id":"trn_1",
"tool_call":{"id":"tu_gh","kind":"mcp","name":"create_issue","server":"github","arguments":{"repo":"acme/prod","title":"Deploy"}},
"deciders":"any_driver","deadline":"2026-01-02T03:04:05Z","on_timeout":"reject"}}`

// TestApprovalHandlerDecidesOnTheStream: with a handler, sends carry
// Bae-Approvals: on; a request on the turn's stream reaches the handler
// once, its edited arguments go out as session.decideApproval, and the
// decision notification reaches the outcomes callback.
func TestApprovalHandlerDecidesOnTheStream(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		switch c.Method {
		case "session.sendMessage":
			w.line(approvalRequestLine)
			w.line(approvalRequestLine) // a repeat (a resumed stream) is handled once
			w.line(`{"jsonrpc":"2.0","method":"session.approvalDecision","params":{"approval_id":"apr_1","decision":"approved",
				"arguments":{"repo":"acme/prod","title":"Deploy v2"},"decided_by":{"kind":"driver","client_id":"key_a"}}}`)
			w.result(c, result(`[{"type":"text","text":"Opened it."}]`, ev("evt_1", sdk.EventServerMessageSend, "")))
		case "session.decideApproval":
			w.result(c, map[string]any{"approval_id": "apr_1", "decision": "approved", "decided_by": map[string]any{"kind": "driver", "client_id": "key_a"}})
		}
	}
	var requests []sdk.ApprovalRequest
	var outcomes []sdk.ApprovalOutcome
	s, err := sdk.Connect(context.Background(), f.cfg(),
		sdk.WithApprovalHandler(func(_ context.Context, r sdk.ApprovalRequest) (sdk.ApprovalDecision, error) {
			requests = append(requests, r)
			return sdk.ApproveWith(map[string]string{"repo": "acme/prod", "title": "Deploy v2"}), nil
		}),
		sdk.WithApprovalOutcomes(func(_ context.Context, o sdk.ApprovalOutcome) error { outcomes = append(outcomes, o); return nil }))
	require.NoError(t, err)
	reply, err := s.Send(context.Background(), "open the deploy issue")
	require.NoError(t, err)
	assert.Equal(t, "Opened it.", reply.Text())

	require.Len(t, requests, 1)
	r := requests[0]
	assert.Equal(t, "apr_1", r.ApprovalID)
	assert.Equal(t, sdk.ApprovalToolCall{ID: "tu_gh", Kind: "mcp", Name: "create_issue", Server: "github",
		Arguments: []byte(`{"repo":"acme/prod","title":"Deploy"}`)}, r.ToolCall)
	assert.Equal(t, sdk.DecidersAnyDriver, r.Deciders)
	assert.Equal(t, "2026-01-02T03:04:05Z", r.Deadline.UTC().Format("2006-01-02T15:04:05Z"))
	sends := f.rpcCalls("session.sendMessage")
	require.Len(t, sends, 1)
	assert.Equal(t, "on", sends[0].Header.Get(sdk.ApprovalsHeader))
	decides := f.rpcCalls("session.decideApproval")
	require.Len(t, decides, 1)
	assert.JSONEq(t, `{"approval_id":"apr_1","decision":"approve","arguments":{"repo":"acme/prod","title":"Deploy v2"}}`, string(decides[0].Raw))
	require.Len(t, outcomes, 1)
	assert.Equal(t, sdk.ApprovalOutcome{ApprovalID: "apr_1", Decision: sdk.ApprovalApproved, Arguments: []byte(`{"repo":"acme/prod","title":"Deploy v2"}`),
		DecidedBy: sdk.DecidedBy{Kind: events.DecidedByDriver, ClientID: "key_a"}}, outcomes[0])
}

// TestNoApprovalHandlerSendsNoOptIn: a session without a handler asks for
// nothing new, and ignores approval notifications a server sends anyway.
func TestNoApprovalHandlerSendsNoOptIn(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.line(approvalRequestLine)
		w.result(c, result(`[{"type":"text","text":"ok"}]`))
	}
	s, err := sdk.Connect(context.Background(), f.cfg())
	require.NoError(t, err)
	_, err = s.Send(context.Background(), "hi")
	require.NoError(t, err)
	assert.Empty(t, f.rpcCalls("session.sendMessage")[0].Header.Get(sdk.ApprovalsHeader))
	assert.Empty(t, f.rpcCalls("session.decideApproval"))
}

// TestApprovalHandlerAbstainsAndSubscribe: an abstaining handler decides
// nothing; a subscription with a handler opts in and sees the request.
func TestApprovalHandlerAbstainsAndSubscribe(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		w.line(approvalRequestLine)
		w.event(ev("evt_1", sdk.EventSessionClose, ""))
	}
	seen := 0
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1", sdk.WithApprovalHandler(func(context.Context, sdk.ApprovalRequest) (sdk.ApprovalDecision, error) {
		seen++
		return sdk.Abstain(), nil
	}))
	require.NoError(t, err)
	ids, err := collect(t, s.Subscribe(context.Background(), sdk.SubscribeOptions{}))
	require.NoError(t, err)
	assert.Equal(t, []string{"evt_1"}, ids, "approval notifications are not events")
	assert.Equal(t, 1, seen)
	assert.Equal(t, "on", f.rpcCalls("session.subscribe")[0].Header.Get(sdk.ApprovalsHeader))
	assert.Empty(t, f.rpcCalls("session.decideApproval"))
}

// TestDecideApprovalTypedErrors: each documented refusal matches its
// sentinel (and only its own); other errors stay *RPCError.
func TestDecideApprovalTypedErrors(t *testing.T) {
	cases := []struct {
		code int
		msg  string
		want error
	}{
		{-32001, "approval_not_allowed: only operators decide this call", sdk.ErrApprovalNotAllowed},
		{-32000, "approval_not_pending: apr_1 is already approved", sdk.ErrApprovalNotPending},
		{-32602, "Invalid params: approval_not_found: apr_1", sdk.ErrApprovalNotFound},
		{-32602, "Invalid params: approval_arguments_invalid: title: required", sdk.ErrApprovalArgumentsInvalid},
	}
	all := []error{sdk.ErrApprovalNotAllowed, sdk.ErrApprovalNotPending, sdk.ErrApprovalNotFound, sdk.ErrApprovalArgumentsInvalid}
	for _, tc := range cases {
		t.Run(tc.want.Error(), func(t *testing.T) {
			f := newFake(t)
			f.rpc = func(w *ndjsonWriter, c rpcCall) { w.fail(c, tc.code, tc.msg) }
			s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
			require.NoError(t, err)
			_, err = s.DecideApproval(context.Background(), "apr_1", sdk.Reject("no"))
			require.Error(t, err)
			for _, other := range all {
				assert.Equal(t, other == tc.want, errors.Is(err, other), "%v is %v", err, other)
			}
			var re *sdk.RPCError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.code, re.Code)
			assert.JSONEq(t, `{"approval_id":"apr_1","decision":"reject","message":"no"}`, string(f.rpcCalls("session.decideApproval")[0].Raw))
		})
	}
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) { w.fail(c, -32000, "session is not open") }
	s, err := sdk.Attach(f.cfg(), "ses_1", "bae_ses_1")
	require.NoError(t, err)
	_, err = s.DecideApproval(context.Background(), "apr_1", sdk.Approve())
	assert.False(t, errors.Is(err, sdk.ErrApprovalNotPending))
	assert.True(t, sdk.IsSessionClosed(err))

	_, err = s.DecideApproval(context.Background(), "apr_1", sdk.ApproveWith([]string{"not an object"}))
	assert.ErrorContains(t, err, "JSON object")
	_, err = s.DecideApproval(context.Background(), "apr_1", sdk.Abstain())
	assert.Error(t, err)
}

// TestApprovalHandlerLosingTheRaceIsNotAnError: another decider won; Send
// goes on to the turn's end.
func TestApprovalHandlerLosingTheRaceIsNotAnError(t *testing.T) {
	f := newFake(t)
	f.rpc = func(w *ndjsonWriter, c rpcCall) {
		switch c.Method {
		case "session.sendMessage":
			w.line(approvalRequestLine)
			w.result(c, result(`[{"type":"text","text":"done"}]`))
		case "session.decideApproval":
			w.fail(c, -32000, "approval_not_pending: apr_1 is already rejected")
		}
	}
	s, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithApprovalHandler(func(context.Context, sdk.ApprovalRequest) (sdk.ApprovalDecision, error) {
		return sdk.Approve(), nil
	}))
	require.NoError(t, err)
	reply, err := s.Send(context.Background(), "go")
	require.NoError(t, err)
	assert.Equal(t, "done", reply.Text())

	// A handler's own error aborts Send, like a hook's.
	boom := errors.New("no one on shift")
	s2, err := sdk.Connect(context.Background(), f.cfg(), sdk.WithApprovalHandler(func(context.Context, sdk.ApprovalRequest) (sdk.ApprovalDecision, error) {
		return sdk.ApprovalDecision{}, boom
	}))
	require.NoError(t, err)
	_, err = s2.Send(context.Background(), "go")
	var he *sdk.HookError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "ApprovalHandler", he.Hook)
	assert.ErrorIs(t, err, boom)
}
