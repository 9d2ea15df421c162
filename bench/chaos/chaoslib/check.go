package chaoslib

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/sdk"
)

// The invariants, in report order.
const (
	InvAnsweredOnce  = "answered-once"  // each message answered or refused exactly once; the client saw what is stored
	InvFIFO          = "fifo"           // turns run in each driver's send order and never interleave
	InvAfterClose    = "after-close"    // no event after session.close, in the log or at an observer
	InvProviderPairs = "provider-pairs" // provider.request/response paired per attempt; the fake received no split tool pair
	InvToolPairs     = "tool-pairs"     // every tool.call has its tool.result
	InvSideEffects   = "side-effects"   // sandbox execs once; MCP calls once, or repeated only across a lost worker
	InvDeltas        = "deltas"         // a completed turn's deltas concatenate to its stored answer
	InvUsage         = "usage"          // usage recorded equals the sum of the logged responses; totals equal calls
	InvStuck         = "stuck"          // every workflow idle or closed, every stored message begun, every call resolved
	InvGrowth        = "growth"         // no replica's goroutines or heap growing across its life
)

// Invariants lists every invariant, in report order.
var Invariants = []string{InvAnsweredOnce, InvFIFO, InvAfterClose, InvProviderPairs, InvToolPairs, InvSideEffects, InvDeltas, InvUsage, InvStuck, InvGrowth}

func isInvariant(s string) bool { return slices.Contains(Invariants, s) }

// abandonedText is what the server writes for a client call never answered.
const abandonedText = "Client tool call was abandoned before returning a result."

// Violation is one broken invariant, with what reproduces it.
type Violation struct {
	Invariant string
	Session   string // the session id ("" when not tied to one)
	What      string
	Events    []string // the events (seq id type) that show it
}

// prefixNote ends a deltas violation whose deltas are a strict prefix of
// the answer: the tail never came.
const prefixNote = "(the deltas received are a prefix of the answer: its tail never came)"

func (v Violation) String() string {
	s := fmt.Sprintf("[%s] %s", v.Invariant, v.What)
	if v.Session != "" {
		s = fmt.Sprintf("[%s] session %s: %s", v.Invariant, v.Session, v.What)
	}
	for _, e := range v.Events {
		s += "\n      " + e
	}
	return s
}

func isSummarizing(text string) bool {
	return strings.HasPrefix(text, compaction.SummaryInstruction[:40])
}

// turn is one turn of the log: its events in order.
type turn struct {
	id     string
	events []logEvent
}

func (t *turn) first() logEvent { return t.events[0] }

func (t *turn) count(types ...string) int {
	n := 0
	for _, e := range t.events {
		if slices.Contains(types, e.Type) {
			n++
		}
	}
	return n
}

func (t *turn) describe() []string {
	var out []string
	for _, e := range t.events {
		out = append(out, describeEvent(e))
	}
	return out
}

func describeEvent(e logEvent) string {
	p := string(e.Payload)
	if len(p) > 160 {
		p = p[:160] + "…"
	}
	return fmt.Sprintf("seq %d %s %s turn=%s %s", e.Seq, e.ID, e.Type, e.TurnID, p)
}

// turns groups a log's events by turn, in order of their first event.
func turns(evs []logEvent) []*turn {
	var out []*turn
	byID := map[string]*turn{}
	for _, e := range evs {
		if e.TurnID == "" {
			continue
		}
		t := byID[e.TurnID]
		if t == nil {
			t = &turn{id: e.TurnID}
			byID[e.TurnID] = t
			out = append(out, t)
		}
		t.events = append(t.events, e)
	}
	return out
}

// matches reports whether a client.message.send payload carries the
// call's message: its text, or a genuine tool_result for its tool_use.
func (c *call) matches(payload json.RawMessage) bool {
	for _, b := range benchstack.Blocks(benchstack.ContentOf(payload)) {
		switch {
		case c.ToolUseID == "" && b["type"] == "text" && b["text"] == c.Text:
			return true
		case c.ToolUseID != "" && b["type"] == "tool_result" && b["tool_use_id"] == c.ToolUseID:
			if s, _ := b["content"].(string); s != abandonedText {
				return true
			}
		}
	}
	return false
}

func (c *call) String() string {
	what := fmt.Sprintf("%q", c.Text)
	if c.ToolUseID != "" {
		what = "tool_result for " + c.ToolUseID
	}
	return fmt.Sprintf("driver %d call %d %s %s (key %s, %s → %s, %d sends, outcome %s%s)", c.Driver, c.Seq, c.Kind, what, c.IdemKey,
		c.Start.UTC().Format("15:04:05.000"), c.End.UTC().Format("15:04:05.000"), c.Sends, c.Outcome, errSuffix(c.Err))
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// terminals are the events that answer a turn.
var terminals = []string{"server.message.send", "server.message.interrupted", "session.error"}

// answers counts a turn's answers: its assistant messages (the reply, or
// the kept text of an interrupt), else one for a turn that ended in
// errors (a failed turn logs a session.error per failed step).
func answers(t *turn) int {
	n := t.count("server.message.send", "server.message.interrupted")
	// A paused turn (its reply asks the client for a tool) that is then
	// interrupted ends with the interruption: the pause and the end are
	// one answer (docs/api.md: an interrupt stops a paused turn too).
	if n == 2 && t.count("server.message.interrupted") == 1 {
		for _, e := range t.events {
			if e.Type == "server.message.send" && clientToolUseID(e.Payload) != "" {
				return 1
			}
		}
	}
	if n == 0 && t.count("session.error") > 0 {
		return 1
	}
	return n
}

// Check evaluates every invariant over in. breakInv, when set, corrupts a
// copy of the input first so that invariant must fire (see breakInput).
func Check(in *Input, breakInv string) []Violation {
	if breakInv != "" {
		in = breakInput(in, breakInv)
	}
	var vs []Violation
	add := func(inv, sess, what string, evs []string) {
		vs = append(vs, Violation{Invariant: inv, Session: sess, What: what, Events: evs})
	}
	for _, s := range in.Sessions {
		checkSession(in, s, add)
	}
	checkProviderReceived(in, add)
	for _, u := range in.Unbegun {
		add(InvStuck, "", "a stored message never began: turn input "+u, nil)
	}
	checkGrowth(in, add)
	return vs
}

func checkSession(in *Input, s *SessionInput, add func(inv, sess, what string, evs []string)) {
	ts := turns(s.Events)
	// Which turn each client.message.send opens, by the call it carries.
	claimed := map[string]bool{}
	byDriver := map[int][]*call{}
	for _, c := range s.Calls {
		byDriver[c.Driver] = append(byDriver[c.Driver], c)
	}
	turnOf := map[*call]*turn{}
	for _, c := range s.Calls {
		var found []*turn
		for _, t := range ts {
			for _, e := range t.events {
				if e.Type == "client.message.send" && c.matches(e.Payload) {
					found = append(found, t)
					break
				}
			}
		}
		switch c.Outcome {
		case outLost, "":
			add(InvStuck, s.ID, "the client never learned the outcome: "+c.String(), turnEvents(found))
		case outRefused:
			if strings.Contains(c.Err, "session_busy") && len(found) > 0 {
				add(InvAnsweredOnce, s.ID, "refused, yet stored and run: "+c.String(), turnEvents(found))
			}
		}
		if len(found) > 1 {
			add(InvAnsweredOnce, s.ID, fmt.Sprintf("%d turns for one message: %s", len(found), c.String()), turnEvents(found))
		}
		if (c.Outcome == outAnswered || c.Outcome == outInterrupted || c.Outcome == outFailed) && len(found) == 0 {
			add(InvAnsweredOnce, s.ID, "answered, but no client.message.send in the log: "+c.String(), nil)
		}
		for _, t := range found {
			claimed[t.id] = true
		}
		if len(found) == 1 {
			t := found[0]
			turnOf[c] = t
			if n := answers(t); n != 1 {
				add(InvAnsweredOnce, s.ID, fmt.Sprintf("%d answers (server.message.send or server.message.interrupted, else a session.error) in the turn of %s, want 1", n, c.String()), t.describe())
			}
			if want := "echo: " + c.Text; c.Outcome == outAnswered && echoes(c.Kind) && benchstack.MessageText(c.Reply) != want {
				add(InvAnsweredOnce, s.ID, fmt.Sprintf("answered %q, which answers another message (want %q): %s", benchstack.MessageText(c.Reply), want, c.String()), t.describe())
			}
			if c.Reply != nil && !storedAnswer(t, c.Reply) {
				last := lastOf(t, terminals[:2]...)
				stored := json.RawMessage("none")
				if last != nil {
					stored = benchstack.ContentOf(last.Payload)
				}
				add(InvAnsweredOnce, s.ID, fmt.Sprintf("the client saw %s, the log stores %s: %s", truncate(benchstack.ContentOf(c.Reply)), truncate(stored), c.String()), t.describe())
			}
		}
	}
	for _, t := range ts {
		if t.count("client.message.send") > 0 && !claimed[t.id] {
			add(InvAnsweredOnce, s.ID, "a turn no client call sent (or sent twice)", t.describe())
		}
		if t.count("client.message.send") > 1 {
			add(InvAnsweredOnce, s.ID, "two client.message.send events in one turn", t.describe())
		}
	}
	// FIFO: each driver's turns in its send order; no turn interleaved
	// with another.
	for d, calls := range byDriver {
		prev := int64(-1)
		var prevCall *call
		for _, c := range calls {
			t := turnOf[c]
			if t == nil {
				continue
			}
			if at := t.first().Seq; at < prev {
				add(InvFIFO, s.ID, fmt.Sprintf("driver %d's %s ran before its earlier %s", d, c.String(), prevCall.String()), append(t.describe(), turnOf[prevCall].describe()...))
			} else {
				prev, prevCall = at, c
			}
		}
	}
	ended := map[string]bool{}
	var open *turn
	for _, e := range s.Events {
		if e.TurnID == "" {
			continue
		}
		if ended[e.TurnID] {
			add(InvFIFO, s.ID, "an event of turn "+e.TurnID+" after a later turn began", []string{describeEvent(e)})
			continue
		}
		if open != nil && open.id != e.TurnID {
			ended[open.id] = true
		}
		if open == nil || open.id != e.TurnID {
			open = &turn{id: e.TurnID}
		}
	}
	// Nothing after session.close, but the stop of its sandbox that the
	// close itself starts (reason session_close).
	closeSeq := int64(-1)
	for _, e := range s.Events {
		if closeSeq >= 0 && !closingSandbox(e) {
			add(InvAfterClose, s.ID, "an event after session.close", []string{describeEvent(e)})
		}
		if e.Type == "session.close" && closeSeq < 0 {
			closeSeq = e.Seq
		}
	}
	if s.Closed && closeSeq < 0 {
		add(InvStuck, s.ID, "closed by the campaign, but no session.close in the log", nil)
	}
	ids := map[string]bool{}
	for _, e := range s.Events {
		ids[e.ID] = true
	}
	for j, obs := range s.Observed {
		sawClose := false
		for _, e := range obs {
			if sawClose {
				add(InvAfterClose, s.ID, fmt.Sprintf("observer %d received %s %s after session.close", j, e.Type, e.ID), nil)
			}
			if e.Type == "session.close" {
				sawClose = true
			}
			if !ids[e.ID] {
				add(InvAnsweredOnce, s.ID, fmt.Sprintf("observer %d received %s %s, which the log does not have", j, e.Type, e.ID), nil)
			}
		}
	}
	// Provider and tool pairs in the log.
	for _, t := range ts {
		for _, msg := range providerPairs(t) {
			add(InvProviderPairs, s.ID, msg, t.describe())
		}
	}
	calls := map[string]logEvent{}
	results := map[string]int{}
	for _, e := range s.Events {
		var p struct {
			ID        string `json:"id"`
			ToolUseID string `json:"tool_use_id"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		switch e.Type {
		case "tool.call":
			calls[p.ID] = e
		case "tool.result":
			results[p.ToolUseID]++
		}
	}
	for id, e := range calls {
		switch n := results[id]; {
		case n == 0 && !(s.Closed && isLastTurn(ts, e.TurnID)):
			add(InvToolPairs, s.ID, "tool_use "+id+" has no tool.result", []string{describeEvent(e)})
		case n > 1:
			add(InvToolPairs, s.ID, fmt.Sprintf("tool_use %s has %d tool.result events", id, n), []string{describeEvent(e)})
		}
	}
	// Side effects.
	faults := processFaultWindows(in.Faults)
	for _, c := range s.Calls {
		switch c.Kind {
		case kindSandbox:
			n := s.SandboxRuns[c.Tag]
			switch {
			case n > 1:
				add(InvSideEffects, s.ID, fmt.Sprintf("sandbox command %s ran %d times (at most once): %s", c.Tag, n, c.String()), turnEvents(single(turnOf[c])))
			case n == 0 && c.Outcome == outAnswered && s.SandboxRuns != nil:
				add(InvSideEffects, s.ID, "answered, but the sandbox command never ran: "+c.String(), turnEvents(single(turnOf[c])))
			}
		case kindMCPHTTP, kindMCPStdio:
			mc := in.MCPHTTP[c.Tag]
			if c.Kind == kindMCPStdio {
				mc = in.MCPStdio[c.Tag]
			}
			if len(mc) == 0 && c.Outcome == outAnswered {
				add(InvSideEffects, s.ID, "answered, but the MCP server never saw the call: "+c.String(), turnEvents(single(turnOf[c])))
			}
			for i := 1; i < len(mc); i++ {
				if !faultBetween(faults, mc[i-1].Start, mc[i].Start) {
					add(InvSideEffects, s.ID, fmt.Sprintf("MCP call %s repeated (call %d at %s) with no lost worker since the call before (%s): %s", c.Tag, i+1,
						mc[i].Start.UTC().Format("15:04:05.000"), mc[i-1].Start.UTC().Format("15:04:05.000"), c.String()), turnEvents(single(turnOf[c])))
				}
			}
		}
	}
	// Deltas of completed turns.
	for _, c := range s.Calls {
		if c.Outcome != outAnswered || c.DeltaSends != 1 || c.Kind == kindTool || c.Kind == kindContinue && clientToolUseID(c.Reply) != "" {
			continue
		}
		want := benchstack.MessageText(c.Reply)
		got, ok := concatDeltas(c.Deltas)
		if ok && got != want {
			evs := turnEvents(single(turnOf[c]))
			if strings.HasPrefix(want, got) {
				evs = append(evs, prefixNote)
			}
			add(InvDeltas, s.ID, fmt.Sprintf("the deltas say %q, the answer is %q: %s", got, want, c.String()), evs)
		}
	}
	// Usage.
	var logged provider.Usage
	var n int64
	for _, e := range s.Events {
		if u, ok := benchstack.EventUsage(e.Type, e.Payload); ok {
			n++
			logged = logged.Add(u)
		}
	}
	if n != s.UsageCalls || logged != s.UsageCallsSum {
		add(InvUsage, s.ID, fmt.Sprintf("usage recorded for %d calls %+v, the log's responses say %d calls %+v", s.UsageCalls, s.UsageCallsSum, n, logged), nil)
	}
	if s.UsageTotals != s.UsageCallsSum {
		add(InvUsage, s.ID, fmt.Sprintf("usage totals %+v differ from the sum of the calls %+v", s.UsageTotals, s.UsageCallsSum), nil)
	}
	// Stuck.
	switch {
	case s.Control == nil && !s.Closed:
		add(InvStuck, s.ID, "the Session workflow does not answer: "+s.CtlErr, nil)
	case s.Control != nil && (s.Control.Busy || s.Control.Queued > 0 || s.Control.Paused != nil):
		add(InvStuck, s.ID, fmt.Sprintf("the Session workflow is not idle at the end: busy=%v queued=%d running=%q paused=%v", s.Control.Busy, s.Control.Queued, s.Control.Running, s.Control.Paused != nil), nil)
	}
}

// closingSandbox reports the sandbox stop a close starts: it is logged
// after session.close, as part of closing.
func closingSandbox(e logEvent) bool {
	if e.Type != "session.sandbox.stop" && e.Type != "session.sandbox.stopped" {
		return false
	}
	var p struct {
		Reason string `json:"reason"`
	}
	return json.Unmarshal(e.Payload, &p) == nil && p.Reason == "session_close"
}

func single(t *turn) []*turn {
	if t == nil {
		return nil
	}
	return []*turn{t}
}

func turnEvents(ts []*turn) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.describe()...)
	}
	return out
}

// echoes reports the kinds whose answer is the fake's echo of their own
// text: any other answer is another message's.
func echoes(kind string) bool {
	switch kind {
	case kindPlain, kindSlow, kindMCPHTTP, kindMCPStdio, kindSandbox, kindReject, kindBusyInt:
		return true
	}
	return false
}

// storedAnswer reports whether the answer a client saw is one the turn
// stored: its reply, its pause, or its kept text.
func storedAnswer(t *turn, reply json.RawMessage) bool {
	for _, e := range t.events {
		if (e.Type == "server.message.send" || e.Type == "server.message.interrupted") && sameJSON(benchstack.ContentOf(reply), benchstack.ContentOf(e.Payload)) {
			return true
		}
	}
	return false
}

func lastOf(t *turn, types ...string) *logEvent {
	for i := len(t.events) - 1; i >= 0; i-- {
		if slices.Contains(types, t.events[i].Type) {
			return &t.events[i]
		}
	}
	return nil
}

func isLastTurn(ts []*turn, id string) bool {
	return len(ts) > 0 && ts[len(ts)-1].id == id
}

// providerPairs checks a turn's provider events come as request/response
// pairs per attempt.
func providerPairs(t *turn) []string {
	var out []string
	open := -1
	for _, e := range t.events {
		if e.Type != "provider.request" && e.Type != "provider.response" {
			continue
		}
		var pl struct {
			Attempt int `json:"attempt"`
		}
		_ = json.Unmarshal(e.Payload, &pl)
		switch e.Type {
		case "provider.request":
			if open >= 0 {
				out = append(out, fmt.Sprintf("provider.request a%d (%s) while a%d has no response", pl.Attempt, e.ID, open))
			}
			open = pl.Attempt
		case "provider.response":
			switch {
			case open < 0:
				out = append(out, fmt.Sprintf("provider.response a%d (%s) without a request", pl.Attempt, e.ID))
			case open != pl.Attempt:
				out = append(out, fmt.Sprintf("provider.response a%d (%s) answers request a%d", pl.Attempt, e.ID, open))
			}
			open = -1
		}
	}
	if open >= 0 && t.count("server.message.interrupted") == 0 {
		out = append(out, fmt.Sprintf("provider.request a%d has no response", open))
	}
	return out
}

// checkProviderReceived checks what the fake provider received: every
// tool_result answers the tool_use just before it, and every tool_use is
// answered in the next message; and the log holds no request the fake
// never received.
func checkProviderReceived(in *Input, add func(inv, sess, what string, evs []string)) {
	ids := func(typ, field string, content any) map[string]bool {
		out := map[string]bool{}
		bl, _ := content.([]any)
		for _, b := range bl {
			if bm, ok := b.(map[string]any); ok && bm["type"] == typ {
				if s, ok := bm[field].(string); ok {
					out[s] = true
				}
			}
		}
		return out
	}
	for n, msgs := range in.Requests {
		for i, m := range msgs {
			if res := ids("tool_result", "tool_use_id", m["content"]); len(res) > 0 {
				if i == 0 || !reflect.DeepEqual(ids("tool_use", "id", msgs[i-1]["content"]), res) {
					add(InvProviderPairs, "", fmt.Sprintf("provider request %d, message %d: tool_result %v without its tool_use just before", n, i, keys(res)), nil)
				}
			}
			if uses := ids("tool_use", "id", m["content"]); len(uses) > 0 && i < len(msgs)-1 {
				if !reflect.DeepEqual(uses, ids("tool_result", "tool_use_id", msgs[i+1]["content"])) {
					add(InvProviderPairs, "", fmt.Sprintf("provider request %d, message %d: tool_use %v not answered in the next message", n, i, keys(uses)), nil)
				}
			}
		}
	}
	logged := 0
	for _, s := range in.Sessions {
		for _, e := range s.Events {
			if e.Type == "provider.request" {
				logged++
			}
		}
	}
	if logged > in.ProviderServed {
		add(InvProviderPairs, "", fmt.Sprintf("%d provider.request events logged, but the provider received %d requests", logged, in.ProviderServed), nil)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// concatDeltas is the text a turn's deltas say its answer is: the last
// iteration's text deltas per block (a superseded voids what came before
// it), blocks joined as messageText joins them. ok is false when the
// stream reported a reset (the client relies on the events then).
func concatDeltas(ds []sdk.Delta) (string, bool) {
	last := -1
	for _, d := range ds {
		if d.Type == "reset" {
			return "", false
		}
		last = max(last, d.Iteration)
	}
	texts := map[int]*strings.Builder{}
	var order []int
	for _, d := range ds {
		if d.Iteration != last {
			continue
		}
		switch d.Type {
		case "superseded":
			texts, order = map[int]*strings.Builder{}, nil
		case "block_start":
			var b struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(d.Block, &b)
			if b.Type == "text" && texts[d.Index] == nil {
				texts[d.Index] = &strings.Builder{}
				order = append(order, d.Index)
			}
		case "text_delta":
			if texts[d.Index] == nil {
				texts[d.Index] = &strings.Builder{}
				order = append(order, d.Index)
			}
			texts[d.Index].WriteString(d.Text)
		}
	}
	sort.Ints(order)
	var parts []string
	for _, i := range order {
		parts = append(parts, texts[i].String())
	}
	return strings.Join(parts, "\n"), true
}

// window is a process fault's span.
type window struct{ start, end time.Time }

func processFaultWindows(fs []faultEvent) []window {
	var out []window
	for _, f := range fs {
		if processFaults[f.Kind] {
			out = append(out, window{f.Start, f.End})
		}
	}
	return out
}

// faultBetween reports whether a process fault overlapped [a, b] (with a
// few seconds' slack after it: a retry comes after the fault ends).
func faultBetween(ws []window, a, b time.Time) bool {
	for _, w := range ws {
		if !w.start.After(b) && !w.end.Add(30*time.Second).Before(a) {
			return true
		}
	}
	return false
}

// Growth is judged on a replica incarnation's steady state: the first
// growthWarmup of its life is its warm-up (the sessions' conversations
// loaded, the clients of the restart that started it reconnecting and
// resuming), not its early level, and it is judged only with
// growthSamples samples after that (a minute). A shorter life is mostly
// warm-up: judged on its first samples, a 55 s incarnation on a contended
// machine "grew" 104 → 278 MiB of heap in use.
const (
	growthWarmup  = 30 * time.Second
	growthSamples = 12
)

// checkGrowth looks at every replica incarnation that lived long enough:
// its goroutines and heap late in its life must not have grown well past
// their level early on (the least of the last quarter against the most of
// the first, warm-up left out). Goroutines are judged net of the load they
// serve (unexplained): a fresh replica takes on clients for minutes as
// their streams end elsewhere and reconnect, sessions' MCP connections as
// their tools run on it, and their workflows as their tasks come to it. The heap is the GC's goal (sample.HeapGoal),
// which follows the live heap, not the garbage between collections.
func checkGrowth(in *Input, add func(inv, sess, what string, evs []string)) {
	type key struct {
		r string
		i int
	}
	by := map[key][]sample{}
	var order []key
	for _, s := range in.Samples {
		k := key{s.Replica, s.Incarnation}
		if by[k] == nil {
			order = append(order, k)
		}
		by[k] = append(by[k], s)
	}
	heap := func(s sample) float64 {
		if s.HeapGoal > 0 {
			return s.HeapGoal
		}
		return s.HeapBytes // scraped without the goal
	}
	for _, k := range order {
		all := by[k]
		ss := all
		for len(ss) > 0 && ss[0].At.Sub(all[0].At) < growthWarmup {
			ss = ss[1:]
		}
		if len(ss) < growthSamples {
			continue
		}
		q := len(ss) / 4
		early, late := ss[:q], ss[len(ss)-q:]
		maxG, maxH := 0.0, 0.0
		var atMaxG sample
		for _, s := range early {
			if u := unexplained(s); u > maxG || atMaxG.At.IsZero() {
				maxG, atMaxG = u, s
			}
			maxH = max(maxH, heap(s))
		}
		minG, minH := unexplained(late[0]), heap(late[0])
		atMinG := late[0]
		for _, s := range late {
			if u := unexplained(s); u < minG {
				minG, atMinG = u, s
			}
			minH = min(minH, heap(s))
		}
		life := all[len(all)-1].At.Sub(all[0].At).Round(time.Second)
		if grows(maxG, minG) {
			what := fmt.Sprintf("replica %s incarnation %d: goroutines the load does not explain grew from at most %.0f to at least %.0f over %s "+
				"(goroutines %.0f -> %.0f, open client requests %.0f -> %.0f, sessions with MCP connections %.0f -> %.0f, workflows loaded %.0f -> %.0f)",
				k.r, k.i, maxG, minG, life, atMaxG.Goroutines, atMinG.Goroutines, atMaxG.Requests, atMinG.Requests,
				atMaxG.MCPSessions, atMinG.MCPSessions, atMaxG.Workflows, atMinG.Workflows)
			evs := []string{"no goroutine profile (the replica was not reachable at /debug/pprof: BAE_PPROF)"}
			if rp := in.Profiles[profileKey(k.r, k.i)]; rp != nil && rp.Peak != nil {
				evs = topGrowth(rp.Base, rp.Peak, 12)
			}
			add(InvGrowth, "", what, evs)
		}
		if minH > 2*maxH+64<<20 {
			add(InvGrowth, "", fmt.Sprintf("replica %s incarnation %d: heap (GC goal) grew from at most %.0f MiB to at least %.0f MiB over %s", k.r, k.i, maxH/(1<<20), minH/(1<<20), life), nil)
		}
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func truncate(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "…"
	}
	return string(b)
}
