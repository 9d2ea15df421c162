package chaoslib

import (
	"bytes"
	"encoding/json"
	"runtime"
	"runtime/pprof"
	"strings"
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

// An interrupted turn whose provider call then answers again, a failed
// turn answered after all and a deltas stream missing its tail each fire
// (finding 2's first shape, and finding 3).
func TestCheckLateAnswersFire(t *testing.T) {
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
			Deltas: []sdk.Delta{{Type: "text_delta", Text: "echo: next"}}},
	}
	vs := Check(in, "")
	got := invariants(vs)
	assert.Positive(t, got[InvAnsweredOnce])
	assert.Positive(t, got[InvFIFO])

	// A turn failed (its budget spent), then its provider call answered.
	s.Events = []logEvent{
		ev(1, "t1", "client.message.send", `{"role":"user","content":[{"type":"text","text":"hi"}]}`),
		ev(2, "t1", "session.error", `{"reason":"turn_failed","detail":"budget spent"}`),
		ev(3, "t1", "provider.request", `{"attempt":0}`),
		ev(4, "t1", "provider.response", `{"attempt":0}`),
		ev(5, "t1", "server.message.send", `{"role":"assistant","content":[{"type":"text","text":"echo: other"}]}`),
	}
	s.Calls = []*call{{Kind: kindPlain, Text: "hi", Outcome: outAnswered, Reply: json.RawMessage(`{"content":[{"type":"text","text":"echo: other"}]}`)}}
	vs = Check(in, "")
	require.Positive(t, invariants(vs)[InvAnsweredOnce])

	// Deltas missing their tail, without a reset: finding 3, fixed.
	in = oneTurn()
	in.Sessions[0].Calls[0].Deltas = in.Sessions[0].Calls[0].Deltas[:1]
	vs = Check(in, "")
	require.Equal(t, 1, invariants(vs)[InvDeltas])
}

// supersededTurn is a session whose first turn logged work (its provider
// request, a compaction) and then nothing before a later turn, of another
// driver, began and was answered: finding 2's shape since attempts are
// fenced (the first turn ended superseded).
func supersededTurn(work logEvent) *Input {
	in := oneTurn()
	s := in.Sessions[0]
	work.Seq, work.TurnID = 2, "t1"
	s.Events = []logEvent{
		ev(1, "t1", "client.message.send", `{"role":"user","content":[{"type":"text","text":"hi"}]}`),
		work,
		ev(3, "t2", "client.message.send", `{"role":"user","content":[{"type":"text","text":"next"}]}`),
		ev(4, "t2", "provider.request", `{"attempt":0}`),
		ev(5, "t2", "provider.response", `{"attempt":0}`),
		ev(6, "t2", "server.message.send", `{"role":"assistant","content":[{"type":"text","text":"echo: next"}]}`),
	}
	s.Calls = []*call{
		{Kind: kindPlain, Text: "hi", Outcome: outFailed},
		{Driver: 1, Kind: kindPlain, Text: "next", Outcome: outAnswered, Reply: json.RawMessage(`{"content":[{"type":"text","text":"echo: next"}]}`)},
	}
	return in
}

// A turn that logged its request, or began its work with a compaction, and
// then nothing before a later turn began (finding 2's second shape) fires;
// so does the same turn answered after the later one.
func TestCheckSupersededTurnsFire(t *testing.T) {
	for _, c := range []struct {
		name string
		work logEvent
		want []string // invariants that fire
	}{
		{"after its request", ev(2, "t1", "provider.request", `{"attempt":0}`), []string{InvAnsweredOnce, InvProviderPairs}},
		{"after a compaction, before any request", ev(2, "t1", "session.compaction", `{"layer":"clear_tool_results"}`), []string{InvAnsweredOnce}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs := Check(supersededTurn(c.work), "")
			got := invariants(vs)
			for _, inv := range c.want {
				require.Positive(t, got[inv], inv)
			}
		})
	}

	// Its answer stored after the later turn's breaks the order.
	in := supersededTurn(ev(2, "t1", "provider.request", `{"attempt":0}`))
	s := in.Sessions[0]
	s.Events = append(s.Events, ev(7, "t1", "provider.response", `{"attempt":0}`), ev(8, "t1", "server.message.send", `{"role":"assistant","content":[{"type":"text","text":"echo: next"}]}`))
	assert.Positive(t, invariants(Check(in, ""))[InvFIFO])
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

// The growth check judges a replica's steady state: not a short life that
// is mostly warm-up (the 55 s incarnation of a contended run whose heap in
// use went 104 → 278 MiB), nor the garbage between collections (heap in
// use swinging while the GC's goal holds); a leak still fires.
func TestCheckGrowthJudgesTheSteadyState(t *testing.T) {
	t0 := time.Now()
	mib := func(n int) float64 { return float64(n << 20) }
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * sampleEvery) }
	growth := func(ss []sample) int {
		in := oneTurn()
		in.Samples = ss
		return invariants(Check(in, ""))[InvGrowth]
	}

	// The shape the contended run reported, as heap in use: ~100 MiB for
	// its first 15 s, then 280-300 MiB; the GC's goal is steady at twice
	// the live heap once warm.
	var short []sample
	for i := range 12 {
		inUse, goal := 100, 200
		if i >= 3 {
			inUse, goal = 280+5*(i%4), 300
		}
		short = append(short, sample{Replica: "a", Incarnation: 3, At: at(i), Goroutines: 300, HeapBytes: mib(inUse), HeapGoal: mib(goal)})
	}
	assert.Zero(t, growth(short), "a 55 s life is its warm-up")

	// Three minutes: heap in use low after collections early on, high at
	// the end where the GC ran late; the goal holds.
	var late []sample
	for i := range 36 {
		inUse, goal := 100, 220
		switch {
		case i < 6:
			inUse, goal = 60+10*i, 100+20*i // warming up
		case i >= 27:
			inUse = 290 + 5*(i%3)
		}
		late = append(late, sample{Replica: "a", Incarnation: 1, At: at(i), Goroutines: float64(300 + 40*(i%4)), HeapBytes: mib(inUse), HeapGoal: mib(goal)})
	}
	assert.Zero(t, growth(late), "garbage the GC has not collected yet is not growth")

	assert.Equal(t, 2, growth(leakingReplica(t0)), "a leak of goroutines and heap fires twice")
}

// A fresh replica takes on clients and sessions' MCP connections for
// minutes after it starts (the hour-long run's replica a, incarnation 46:
// 164 -> 554 goroutines over 91 s): not growth. The same goroutines with
// the load flat are, and the violation lists the profile's growth by
// creation site.
func TestCheckGrowthNetOfTheLoad(t *testing.T) {
	t0 := time.Now()
	taking := func(loadGrows bool) *Input {
		in := oneTurn()
		for i := range 36 {
			n := max(0, i-6)
			s := sample{Replica: "a", Incarnation: 46, At: t0.Add(time.Duration(i) * sampleEvery),
				Goroutines: float64(164 + 30*n), HeapGoal: 64 << 20, Requests: 20, MCPSessions: 2}
			if loadGrows {
				s.Requests, s.MCPSessions = float64(20+3*n), float64(2+2*n)
			}
			in.Samples = append(in.Samples, s)
		}
		return in
	}
	assert.Zero(t, invariants(Check(taking(true), ""))[InvGrowth], "goroutines the clients and MCP connections hold")

	in := taking(false)
	base := &goroutineProfile{Total: 164, Counts: map[goroutineGroup]int{{"net/http.(*Server).Serve", "api.(*clientAPI).relay"}: 20}}
	peak := &goroutineProfile{At: t0, Total: 554, Counts: map[goroutineGroup]int{
		{"net/http.(*Server).Serve", "api.(*clientAPI).relay"}: 20, {"store.(*Listener).wait", "store.(*Listener).notify"}: 390}}
	in.Profiles = map[string]*replicaProfiles{profileKey("a", 46): {Base: base, Peak: peak}}
	vs := Check(in, "")
	require.Equal(t, 1, invariants(vs)[InvGrowth], "%v", vs)
	assert.Contains(t, vs[0].String(), "+390 (0 -> 390) created by store.(*Listener).wait, waiting in store.(*Listener).notify")
	assert.NotContains(t, vs[0].String(), "relay", "groups that did not grow are left out")
}

// Breaking an invariant on purpose copies the input; goroutine profiles
// (keyed by group, which JSON cannot key by) must survive the copy, as
// tests/chaos breaks every invariant on a campaign that captured some.
func TestBreakInputKeepsGoroutineProfiles(t *testing.T) {
	in := &Input{Profiles: map[string]*replicaProfiles{profileKey("a", 1): {
		Base: &goroutineProfile{Total: 10, Counts: map[goroutineGroup]int{{"a", "b"}: 3}}}}}
	// Every break copies the input first; growth's needs no sessions.
	c := breakInput(in, InvGrowth)
	require.Equal(t, 3, c.Profiles[profileKey("a", 1)].Base.Counts[goroutineGroup{"a", "b"}])
}

// A debug=2 goroutine dump groups by the function that started each
// goroutine and the first frame outside the runtime and the standard
// library's waits.
func TestParseGoroutinesGroupsByCreationSite(t *testing.T) {
	dump := `goroutine 1 [running]:
main.main()
	/src/main.go:10 +0x1d

goroutine 7 [select]:
github.com/bae-go/bae-go/api.(*clientAPI).relay(0x1e3f, {0xf68366, 0x5})
	/src/api/relay.go:40 +0x2a
created by net/http.(*Server).Serve in goroutine 1
	/go/src/net/http/server.go:3400 +0x4d4

goroutine 8 [chan receive]:
runtime.gopark(...)
	/go/src/runtime/proc.go:1 +0x1
sync.(*Cond).Wait(0x1e3f)
	/go/src/sync/cond.go:70 +0x1
github.com/bae-go/bae-go/api.(*clientAPI).relay(0x1e3f, {0xf68366, 0x5})
	/src/api/relay.go:44 +0x2a
created by net/http.(*Server).Serve in goroutine 1
	/go/src/net/http/server.go:3400 +0x4d4

goroutine 9 [IO wait]:
internal/poll.runtime_pollWait(0x7f, 0x72)
	/go/src/runtime/netpoll.go:351 +0x85
net/http.(*persistConn).readLoop()
	/go/src/net/http/transport.go:2200 +0x1
created by net/http.(*Transport).dialConn in goroutine 7
	/go/src/net/http/transport.go:1900 +0x1
`
	gp, err := parseGoroutines(strings.NewReader(dump))
	require.NoError(t, err)
	assert.Equal(t, 4, gp.Total)
	assert.Equal(t, map[goroutineGroup]int{
		{"(main)", "main.main"}: 1,
		{"net/http.(*Server).Serve", "github.com/bae-go/bae-go/api.(*clientAPI).relay"}: 2,
		{"net/http.(*Transport).dialConn", "internal/poll.runtime_pollWait"}:            1,
	}, gp.Counts)
}

// The runtime's own dump parses the same way: this test's goroutine is
// one started by testing.(*T).Run and held in this function.
func TestParseGoroutinesReadsTheRuntimesDump(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 2))
	gp, err := parseGoroutines(&buf)
	require.NoError(t, err)
	assert.InDelta(t, runtime.NumGoroutine(), gp.Total, 2)
	assert.Positive(t, gp.Counts[goroutineGroup{"testing.(*T).Run", "github.com/bae-go/bae-go/bench/chaos/chaoslib.TestParseGoroutinesReadsTheRuntimesDump"}], "%v", gp.Counts)
}

// A late turn's consequences fire: its tool_use without a tool.result, and
// each provider request that holds a second tool_result for one tool_use.
func TestCheckWhatALateTurnLeavesFires(t *testing.T) {
	in := oneTurn()
	s := in.Sessions[0]
	s.Events = []logEvent{
		ev(1, "t1", "client.message.send", `{"role":"user","content":[{"type":"text","text":"hi"}]}`),
		ev(2, "t1", "provider.request", `{"attempt":0}`),
		ev(3, "t1", "provider.response", `{"attempt":0}`),
		ev(4, "t1", "tool.call", `{"id":"toolu_late","name":"count"}`),
		ev(5, "t1", "server.message.interrupted", `{"role":"assistant","content":[{"type":"text","text":"[interrupted]"}]}`),
		ev(6, "t1", "provider.request", `{"attempt":0}`),
		ev(7, "t1", "tool.call", `{"id":"toolu_late2","name":"count"}`),
	}
	s.Calls = []*call{{Kind: kindMCPHTTP, Text: "hi", Outcome: outInterrupted, Reply: json.RawMessage(`{"content":[{"type":"text","text":"[interrupted]"}]}`)}}
	use := func(id string) map[string]any {
		return map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id}}}
	}
	result := func(id string) map[string]any {
		return map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id}}}
	}
	in.Requests = [][]map[string]any{
		{use("toolu_late"), result("toolu_late"), result("toolu_late")},
		{use("toolu_other"), result("toolu_other"), result("toolu_other")},
	}
	in.ProviderServed = 10
	vs := Check(in, "")
	got := invariants(vs)
	require.Positive(t, got[InvToolPairs])
	require.Equal(t, 2, got[InvProviderPairs]-countSession(vs, InvProviderPairs))
}

func countSession(vs []Violation, inv string) int {
	n := 0
	for _, v := range vs {
		if v.Invariant == inv && v.Session != "" {
			n++
		}
	}
	return n
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
