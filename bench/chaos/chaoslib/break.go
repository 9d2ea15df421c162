package chaoslib

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/bae-go/bae-go/workflows"
)

// breakInput returns a copy of in with the guarantee of invariant inv
// broken on purpose: a duplicated answer, a turn moved out of order, an
// event after a close, a provider response or tool result dropped, a side
// effect run twice, a delta altered, a usage row off by one, a workflow
// left busy, a replica whose goroutines grow. Each must make Check report
// that invariant (tests/chaos and `bench/chaos -break` show it).
func breakInput(in *Input, inv string) *Input {
	// The copy goes through JSON, which cannot key a map by a goroutine
	// group: the profiles are shared instead (no break changes them).
	shallow := *in
	shallow.Profiles = nil
	b, err := json.Marshal(&shallow)
	if err != nil {
		panic(err)
	}
	var c Input
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	c.Profiles = in.Profiles
	maxSeq := func(s *SessionInput) int64 {
		if len(s.Events) == 0 {
			return 0
		}
		return s.Events[len(s.Events)-1].Seq
	}
	clone := func(s *SessionInput, e logEvent) logEvent {
		e.Seq = maxSeq(s) + 1
		e.ID = fmt.Sprintf("evt_broken_%d", e.Seq)
		return e
	}
	switch inv {
	case InvAnsweredOnce:
		// A second answer to a turn.
		for _, s := range c.Sessions {
			for i, e := range s.Events {
				if e.Type == "server.message.send" && e.TurnID != "" {
					dup := clone(s, e)
					s.Events = append(s.Events[:i+1:i+1], append([]logEvent{dup}, s.Events[i+1:]...)...)
					return &c
				}
			}
		}
	case InvFIFO:
		// A driver's first turn moved after all later ones.
		for _, s := range c.Sessions {
			var first string
			for _, cl := range s.Calls {
				if cl.Outcome == outAnswered && cl.Driver == 0 {
					for _, e := range s.Events {
						if e.Type == "client.message.send" && cl.matches(e.Payload) {
							first = e.TurnID
						}
					}
					break
				}
			}
			if first == "" {
				continue
			}
			var keep, moved []logEvent
			for _, e := range s.Events {
				if e.TurnID == first {
					moved = append(moved, e)
				} else {
					keep = append(keep, e)
				}
			}
			s.Events = keep
			for _, e := range moved {
				s.Events = append(s.Events, clone(s, e))
			}
			return &c
		}
	case InvAfterClose:
		for _, s := range c.Sessions {
			if s.Closed && len(s.Events) > 0 {
				s.Events = append(s.Events, clone(s, s.Events[0]))
				return &c
			}
		}
	case InvProviderPairs:
		for _, s := range c.Sessions {
			for i, e := range s.Events {
				if e.Type == "provider.response" {
					s.Events = append(s.Events[:i:i], s.Events[i+1:]...)
					return &c
				}
			}
		}
	case InvToolPairs:
		for _, s := range c.Sessions {
			for i, e := range s.Events {
				if e.Type == "tool.result" {
					s.Events = append(s.Events[:i:i], s.Events[i+1:]...)
					return &c
				}
			}
		}
	case InvSideEffects:
		// An MCP call made again with no fault in between.
		c.Faults = nil
		for _, m := range []map[string][]mcpCall{c.MCPHTTP, c.MCPStdio} {
			for k, v := range m {
				if len(v) > 0 {
					again := v[0]
					again.Start = again.Start.Add(time.Second)
					m[k] = append(v, again)
					return &c
				}
			}
		}
	case InvDeltas:
		for _, s := range c.Sessions {
			for _, cl := range s.Calls {
				if cl.Kind == kindPlain && cl.Outcome == outAnswered && cl.DeltaSends == 1 && len(cl.Deltas) > 0 {
					for i := len(cl.Deltas) - 1; i >= 0; i-- {
						if cl.Deltas[i].Type == "text_delta" {
							cl.Deltas[i].Text += " (altered)"
							return &c
						}
					}
				}
			}
		}
	case InvUsage:
		c.Sessions[0].UsageCallsSum.Input++
		c.Sessions[0].UsageTotals.Input++
		return &c
	case InvStuck:
		for _, s := range c.Sessions {
			if !s.Closed {
				s.Control = &workflows.ControlView{Busy: true, Queued: 1}
				return &c
			}
		}
	case InvGrowth:
		c.Samples = append(c.Samples, leakingReplica(time.Now())...)
		return &c
	}
	return &c
}

// leakingReplica is three minutes of samples of a replica that leaks: after
// a flat warm-up, goroutines climb from 400 to 1,780 and the heap's GC goal
// from 10 to 194 MiB.
func leakingReplica(t0 time.Time) []sample {
	var out []sample
	for i := range 36 {
		n := max(0, i-6)
		out = append(out, sample{Replica: "z", Incarnation: 1, At: t0.Add(time.Duration(i) * sampleEvery),
			Goroutines: float64(400 + 60*n), HeapBytes: float64(20<<20 + n*(16<<20)), HeapGoal: float64(10<<20 + n*(8<<20))})
	}
	return out
}
