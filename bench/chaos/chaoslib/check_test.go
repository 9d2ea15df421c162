package chaoslib

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/sdk"
	"github.com/bae-go/bae-go/workflows"
)

// ev builds a log event of turn (payload given as JSON).
func ev(seq int64, turn, typ, payload string) logEvent {
	return logEvent{Seq: seq, ID: "evt_" + turn + "_" + typ, TurnID: turn, Type: typ, Payload: json.RawMessage(payload)}
}

// oneTurn is a session with one plain turn, answered, and its call.
func oneTurn() *Input {
	answer := `{"role":"assistant","content":[{"type":"text","text":"echo: hi"}]}`
	s := &SessionInput{ID: "ses_1", Control: &workflows.ControlView{}, Events: []logEvent{
		ev(1, "t1", "client.message.send", `{"role":"user","content":[{"type":"text","text":"hi"}]}`),
		ev(2, "t1", "provider.request", `{"attempt":0}`),
		ev(3, "t1", "provider.response", `{"attempt":0,"ok":false}`),
		ev(4, "t1", "server.message.send", answer),
	}, Calls: []*call{{Kind: kindPlain, Text: "hi", Outcome: outAnswered, Reply: json.RawMessage(answer), DeltaSends: 1,
		Deltas: []sdk.Delta{{TurnID: "t1", Type: "text_delta", Text: "echo: "}, {TurnID: "t1", Type: "text_delta", Text: "hi"}}}}}
	return &Input{Sessions: []*SessionInput{s}, ProviderServed: 10}
}

func invariants(vs []Violation) map[string]int {
	m := map[string]int{}
	for _, v := range vs {
		m[v.Invariant]++
	}
	return m
}

func TestCheckCleanTurnHasNoViolation(t *testing.T) {
	assert.Empty(t, Check(oneTurn(), ""))
}

// Each break that the one-turn input can carry fires its invariant (the
// others need data a campaign produces: tests/chaos breaks every one).
func TestCheckBreaksFire(t *testing.T) {
	for _, inv := range []string{InvAnsweredOnce, InvFIFO, InvProviderPairs, InvDeltas, InvUsage, InvStuck, InvGrowth} {
		in := oneTurn()
		if inv == InvFIFO {
			// A second turn of the same driver, so that moving the first
			// after it breaks the order.
			s := in.Sessions[0]
			s.Events = append(s.Events, ev(5, "t2", "client.message.send", `{"role":"user","content":[{"type":"text","text":"again"}]}`),
				ev(6, "t2", "server.message.send", `{"role":"assistant","content":[{"type":"text","text":"echo: again"}]}`))
			s.Calls = append(s.Calls, &call{Kind: kindPlain, Text: "again", Outcome: outAnswered, Reply: json.RawMessage(`{"content":[{"type":"text","text":"echo: again"}]}`)})
		}
		require.Empty(t, Check(in, ""), "%s: clean before the break", inv)
		assert.Positive(t, invariants(Check(in, inv))[inv], "%s does not fire when broken", inv)
	}
}

// An interrupted turn whose provider call then answers again is tagged as
// the open bug it is; a deltas stream missing its tail too; anything else
// is new.
func TestCheckTagsKnownBugs(t *testing.T) {
	in := oneTurn()
	s := in.Sessions[0]
	s.Events = []logEvent{
		ev(1, "t1", "client.message.send", `{"role":"user","content":[{"type":"text","text":"hi"}]}`),
		ev(2, "t1", "provider.request", `{"attempt":0}`),
		ev(3, "t1", "server.message.interrupted", `{"role":"assistant","content":[{"type":"text","text":"[interrupted]"}]}`),
		ev(4, "t2", "client.message.send", `{"role":"user","content":[{"type":"text","text":"next"}]}`),
		ev(5, "t2", "server.message.send", `{"role":"assistant","content":[{"type":"text","text":"echo: next"}]}`),
		ev(6, "t1", "provider.response", `{"attempt":0}`),
		ev(7, "t1", "server.message.send", `{"role":"assistant","content":[{"type":"text","text":"echo: next"}]}`),
	}
	s.Calls = []*call{
		{Kind: kindSlow, Text: "hi", Outcome: outInterrupted, Reply: json.RawMessage(`{"content":[{"type":"text","text":"[interrupted]"}]}`)},
		{Driver: 1, Kind: kindPlain, Text: "next", Outcome: outAnswered, Reply: json.RawMessage(`{"content":[{"type":"text","text":"echo: next"}]}`), DeltaSends: 1,
			Deltas: []sdk.Delta{{Type: "text_delta", Text: "echo: "}}},
	}
	vs := Check(in, "")
	got := invariants(vs)
	assert.Positive(t, got[InvAnsweredOnce])
	assert.Positive(t, got[InvFIFO])
	assert.Positive(t, got[InvDeltas])
	for _, v := range vs {
		assert.NotEmpty(t, v.Known, "untagged: %s", v.String())
	}
	// A delta that is wrong rather than missing is new.
	s.Calls[1].Deltas = []sdk.Delta{{Type: "text_delta", Text: "echo: other"}}
	for _, v := range Check(in, "") {
		if v.Invariant == InvDeltas {
			assert.Empty(t, v.Known, "a wrong delta is not the known bug")
		}
	}
}

// A turn that logged its request and then nothing before a later turn
// began (finding 2 since attempts are fenced: it ended superseded) is
// tagged; the same turn answered after all is not that bug.
func TestCheckTagsSupersededTurns(t *testing.T) {
	in := oneTurn()
	s := in.Sessions[0]
	s.Events = []logEvent{
		ev(1, "t1", "client.message.send", `{"role":"user","content":[{"type":"text","text":"hi"}]}`),
		ev(2, "t1", "provider.request", `{"attempt":0}`),
		ev(3, "t2", "client.message.send", `{"role":"user","content":[{"type":"text","text":"next"}]}`),
		ev(4, "t2", "provider.request", `{"attempt":0}`),
		ev(5, "t2", "provider.response", `{"attempt":0}`),
		ev(6, "t2", "server.message.send", `{"role":"assistant","content":[{"type":"text","text":"echo: next"}]}`),
	}
	s.Calls = []*call{
		{Kind: kindPlain, Text: "hi", Outcome: outFailed},
		{Driver: 1, Kind: kindPlain, Text: "next", Outcome: outAnswered, Reply: json.RawMessage(`{"content":[{"type":"text","text":"echo: next"}]}`)},
	}
	vs := Check(in, "")
	got := invariants(vs)
	assert.Positive(t, got[InvAnsweredOnce])
	assert.Positive(t, got[InvProviderPairs])
	for _, v := range vs {
		assert.Equal(t, knownSuperseded, v.Known, "untagged: %s", v.String())
	}
	// Its answer stored after the later turn is the older shape, not this.
	s.Events = append(s.Events, ev(7, "t1", "provider.response", `{"attempt":0}`), ev(8, "t1", "server.message.send", `{"role":"assistant","content":[{"type":"text","text":"echo: next"}]}`))
	for _, v := range Check(in, "") {
		assert.NotEqual(t, knownSuperseded, v.Known, "%s", v.String())
	}
}

// MCP repeats are allowed only across a process fault.
func TestCheckMCPRepeatNeedsAFault(t *testing.T) {
	in := oneTurn()
	s := in.Sessions[0]
	s.Calls = append(s.Calls, &call{Kind: kindMCPHTTP, Tag: "x", Text: "never sent", Outcome: outRefused})
	t0 := time.Now()
	in.MCPHTTP = map[string][]mcpCall{"x": {{ID: "x", Start: t0, End: t0.Add(time.Second)}, {ID: "x", Start: t0.Add(2 * time.Second)}}}
	assert.Equal(t, 1, invariants(Check(in, ""))[InvSideEffects])
	in.Faults = []faultEvent{{Kind: faultKill, Start: t0.Add(time.Second), End: t0.Add(1500 * time.Millisecond)}}
	assert.Zero(t, invariants(Check(in, ""))[InvSideEffects])
}
