package crashlib

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Report is what a run measured and found.
type Report struct {
	Options  Options
	WorkDir  string
	Database string

	Setup, Drive, Wall time.Duration
	PlannedCalls       int
	PlannedAbandons    int // tool turns the client leaves unanswered on purpose
	Kills              []kill
	// Unexpected lists baesrv exits the killer did not cause.
	Unexpected []string

	Turns          int // user turns (a client tool round trip is one)
	Calls          int // session.sendMessage calls
	ToolRoundTrips int // tool_result continuations sent
	Broken         int // streams that broke before their terminal object
	ErrTerminals   int // streams that ended in a JSON-RPC error
	Recovered      int // replies read from GET /events instead of a stream
	FalseFailures  int // error terminals whose turn completed anyway
	Resends        int // requests resent because they got no HTTP response
	RecoverTimes   []time.Duration
	Abandoned      int // pauses ended by a plain message, not the continuation
	MaxPause       time.Duration
	LongPauses     int // pauses longer than TurnTimeout (still resumed)
	Events         int
	ProviderServed int // requests the fake provider answered
	ProviderLogged int // provider.request events in the logs
	// Landings counts, per kill and session, where in its turn the
	// session was when the kill landed.
	Landings map[string]int

	// Undelivered lists messages the server never stored: the kill fell
	// between the 200 it flushes first and its INSERT of the message. The
	// client saw "200, then EOF" and cannot tell this from a stored turn;
	// no turn existed, so nothing was lost from the log or repeated.
	Undelivered []string

	Violations []string
}

// OK reports a run without violations.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

func (r *Report) count(c *call) {
	r.Calls++
	switch c.Kind {
	case kindContinue:
		r.ToolRoundTrips++
	case kindFinal:
	default:
		r.Turns++
	}
	if c.Broken {
		r.Broken++
	}
	if c.ErrTerm != nil {
		r.ErrTerminals++
		if c.Reply != nil {
			r.FalseFailures++
		}
	}
	if c.Recovered {
		r.Recovered++
		r.RecoverTimes = append(r.RecoverTimes, c.RecoverTook)
	}
	r.Resends += c.Sends - 1
}

func (c *call) outcome() string {
	switch {
	case c.Terminal != nil:
		return "terminal result"
	case c.ErrTerm != nil:
		return fmt.Sprintf("error terminal %d %q, %s", c.ErrTerm.Code, c.ErrTerm.Message, c.Lost)
	case c.Broken:
		return "stream broke, " + c.Lost
	default:
		return c.Lost
	}
}

// pauses checks that every turn paused on the client tool was ended by the
// session's next message: its continuation, or an explicit abandonment
// (synthetic error results) when the continuation was lost.
func (r *Report) pauses(n int, segs []segment, v func(string, ...any)) {
	for i, s := range segs {
		sms := s.replies()
		if len(sms) == 0 {
			continue
		}
		id := clientToolUseID(sms[len(sms)-1].Payload)
		if id == "" {
			continue
		}
		if i+1 == len(segs) {
			v("s%d: session ends paused on tool_use %s", n, id)
			continue
		}
		next := segs[i+1].cms
		if d := parseTime(next.CreatedAt).Sub(parseTime(sms[len(sms)-1].CreatedAt)); d > r.MaxPause {
			r.MaxPause = d
		}
		if parseTime(next.CreatedAt).Sub(parseTime(sms[len(sms)-1].CreatedAt)) > TurnTimeout {
			r.LongPauses++
		}
		resumed, abandoned := false, false
		for _, b := range blocks(contentOf(next.Payload)) {
			if b["type"] == "tool_result" && b["tool_use_id"] == id {
				if c, _ := b["content"].(string); c == abandonedText {
					abandoned = true
				} else {
					resumed = true
				}
			}
		}
		switch {
		case abandoned:
			r.Abandoned++
		case !resumed:
			v("s%d: pause on tool_use %s was neither resumed nor abandoned by the next message %s", n, id, next.ID)
		}
	}
}

// landings classifies where each kill caught each session, from the
// client's call times and the log's event times (millisecond precision).
func (r *Report) landings(calls []*call, segs []segment) {
	for _, k := range r.Kills {
		r.Landings[landing(k.At, calls, segs)]++
	}
}

func landing(at time.Time, calls []*call, segs []segment) string {
	var inFlight, before *call
	for _, c := range calls {
		if !c.Start.After(at) && c.End.After(at) {
			inFlight = c
		}
		if !c.End.After(at) {
			before = c
		}
	}
	if inFlight == nil {
		if before != nil && before.Kind == kindTool && clientToolUseID(before.Reply) != "" {
			return "paused on client tool"
		}
		return "between calls"
	}
	i := findTurn(segs, inFlight.Key)
	if i < 0 || parseTime(segs[i].cms.CreatedAt).After(at) {
		return "sent, turn not begun"
	}
	last := "client.message.send"
	for _, e := range segs[i].events {
		if parseTime(e.CreatedAt).After(at) {
			break
		}
		last = e.Type
	}
	switch last {
	case "client.message.send", "tool.result":
		return "begun, before provider call"
	case "provider.request":
		return "in provider call"
	case "provider.response", "tool.call":
		return "provider answered, reply not logged"
	case "server.message.send":
		return "reply logged, stream not finished"
	}
	return "after " + last
}

// Print writes the human summary.
func (r *Report) Print(w io.Writer) {
	mode := "SIGKILL baesrv"
	if r.Options.KillTemporal {
		mode = "restart Temporal (devstack, SQLite on disk)"
	}
	fmt.Fprintf(w, "crash recovery: %s, seed %d\n", mode, r.Options.Seed)
	fmt.Fprintf(w, "  turns            %d over %d sessions (%d sendMessage calls, %d client tool round trips)\n", r.Turns, r.Options.Sessions, r.Calls, r.ToolRoundTrips)
	var down []time.Duration
	for _, k := range r.Kills {
		down = append(down, k.Down)
	}
	fmt.Fprintf(w, "  kills            %d of %d requested; back to /healthz in %s\n", len(r.Kills), r.Options.Kills, durStats(down))
	if len(r.Unexpected) > 0 {
		fmt.Fprintf(w, "  unexpected exits %d\n", len(r.Unexpected))
		for _, u := range r.Unexpected {
			fmt.Fprintf(w, "    %s\n", u)
		}
	}
	fmt.Fprintf(w, "  kill landings    %s\n", landingSummary(r.Landings))
	fmt.Fprintf(w, "  streams          %d broken, %d ended in a JSON-RPC error (%d of them for a turn that completed); %d replies recovered from GET /events; %d resends of requests that got no HTTP response\n",
		r.Broken, r.ErrTerminals, r.FalseFailures, r.Recovered, r.Resends)
	fmt.Fprintf(w, "  recovery         reply found in the log %s after the stream broke\n", durStats(r.RecoverTimes))
	fmt.Fprintf(w, "  pauses           longest %s (%d longer than BAE_TURN_TIMEOUT=%s); %d abandoned by the next message (%d on purpose)\n", r.MaxPause.Round(time.Millisecond), r.LongPauses, TurnTimeout, r.Abandoned, r.PlannedAbandons)
	fmt.Fprintf(w, "  provider         %d requests served by the fake, %d provider.request logged (%d re-issued after a crash, none logged twice)\n",
		r.ProviderServed, r.ProviderLogged, r.ProviderServed-r.ProviderLogged)
	fmt.Fprintf(w, "  events           %d checked\n", r.Events)
	fmt.Fprintf(w, "  wall             %s (setup %s, turns %s)\n", r.Wall.Round(100*time.Millisecond), r.Setup.Round(100*time.Millisecond), r.Drive.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  undelivered      %d (the server died between its 200 and storing the message)\n", len(r.Undelivered))
	for _, u := range r.Undelivered {
		fmt.Fprintf(w, "    - %s\n", u)
	}
	fmt.Fprintf(w, "  violations       %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "    - %s\n", v)
	}
	if !r.OK() {
		fmt.Fprintf(w, "  kept             work dir %s, database %s\n", r.WorkDir, r.Database)
	}
}

func landingSummary(m map[string]int) string {
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range m {
		all = append(all, kv{k, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].k < all[j].k
	})
	var parts []string
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %d", e.k, e.n))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ") + " (kill × session)"
}

func durStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return fmt.Sprintf("mean %s, max %s", (sum / time.Duration(len(sorted))).Round(10*time.Millisecond), sorted[len(sorted)-1].Round(10*time.Millisecond))
}
