package crashlib

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
)

// Report is what a run measured and found.
type Report struct {
	Options  Options
	WorkDir  string
	Database string

	Setup, Drive, Wall time.Duration
	PlannedCalls       int
	PlannedAbandons    int // tool turns the client leaves unanswered on purpose
	Chaos              []chaosEvent
	// Unexpected lists baesrv exits the killer did not cause.
	Unexpected []string

	Calls          []*call
	Turns          int // user turns (a client tool round trip is one)
	ToolRoundTrips int // tool_result continuations sent
	SandboxTurns   int
	MCPTurns       int
	Resends        int // sends after the first, the SDK's and the client's
	ErrTerminals   int // definite JSON-RPC error terminals
	Abandoned      int // pauses ended by a plain message, not the continuation
	MaxPause       time.Duration
	LongPauses     int // pauses longer than TurnTimeout (still resumed)
	Events         int
	ProviderServed int // requests the fake provider answered
	ProviderLogged int // provider.request events in the logs
	SandboxRepeats int // sandbox turns whose command ran more than once
	MCPRepeats     int // MCP turns whose call reached the server more than once
	// Landings counts, per kill and session, where in its turn the
	// session was when the kill landed.
	Landings map[string]int

	// Problems lists each call's problem classes; Classes counts
	// violations by class (those tied to no call included).
	Problems   map[*call]map[string]bool
	Classes    map[string]int
	Untied     int // violations tied to no call
	Violations []string
}

// OK reports a run without violations.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

func (r *Report) count(c *call) {
	switch c.Kind {
	case kindContinue:
		r.ToolRoundTrips++
	case kindFinal:
	default:
		r.Turns++
	}
	switch c.Kind {
	case kindSandbox:
		r.SandboxTurns++
	case kindMCP:
		r.MCPTurns++
	}
	if c.ErrTerm != nil {
		r.ErrTerminals++
	}
	r.Resends += c.Sends - 1
}

func (c *call) outcome() string {
	switch {
	case c.Terminal != nil:
		return "terminal result"
	case c.ErrTerm != nil:
		return fmt.Sprintf("error terminal %d %q", c.ErrTerm.Code, c.ErrTerm.Message)
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
		for _, b := range benchstack.Blocks(benchstack.ContentOf(next.Payload)) {
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
	for _, k := range r.Chaos {
		if k.Point != "" {
			r.Landings[landing(k.At, calls, segs)]++
		}
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
		if before != nil && before.Kind == kindTool && clientToolUseID(before.Terminal) != "" {
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

// Print writes the human summary and the table per kill point and outage.
func (r *Report) Print(w io.Writer) {
	mode := "SIGKILL baesrv"
	if r.Options.KillTemporal {
		mode = "restart Temporal (devstack, SQLite on disk)"
	}
	fmt.Fprintf(w, "crash recovery: %s, seed %d\n", mode, r.Options.Seed)
	fmt.Fprintf(w, "  turns            %d over %d sessions (%d sendMessage calls: %d client tool round trips, %d sandbox, %d MCP turns)\n",
		r.Turns, r.Options.Sessions, len(r.Calls), r.ToolRoundTrips, r.SandboxTurns, r.MCPTurns)
	var down []time.Duration
	kills, outages, missed := 0, 0, 0
	for _, k := range r.Chaos {
		if k.Point == "" {
			outages++
			continue
		}
		kills++
		if k.Missed {
			missed++
		}
		down = append(down, k.End.Sub(k.At))
	}
	fmt.Fprintf(w, "  kills            %d of %d requested (%d aimed points not seen in time, fired at random); back to /healthz in %s\n", kills, r.Options.Kills, missed, durStats(down))
	fmt.Fprintf(w, "  db outages       %d of %d requested\n", outages, len(r.Options.Outages))
	if len(r.Unexpected) > 0 {
		fmt.Fprintf(w, "  unexpected exits %d\n", len(r.Unexpected))
		for _, u := range r.Unexpected {
			fmt.Fprintf(w, "    %s\n", u)
		}
	}
	fmt.Fprintf(w, "  kill landings    %s\n", landingSummary(r.Landings))
	fmt.Fprintf(w, "  sends            %d resends under the same Idempotency-Key; %d definite JSON-RPC error terminals\n", r.Resends, r.ErrTerminals)
	fmt.Fprintf(w, "  pauses           longest %s (%d longer than BAE_TURN_TIMEOUT=%s); %d abandoned by the next message (%d on purpose)\n", r.MaxPause.Round(time.Millisecond), r.LongPauses, TurnTimeout, r.Abandoned, r.PlannedAbandons)
	fmt.Fprintf(w, "  provider         %d requests served by the fake, %d provider.request logged (%d re-issued after a crash)\n",
		r.ProviderServed, r.ProviderLogged, r.ProviderServed-r.ProviderLogged)
	fmt.Fprintf(w, "  side effects     %d sandbox commands ran more than once; %d MCP calls reached the server more than once (at-least-once, not a violation)\n", r.SandboxRepeats, r.MCPRepeats)
	fmt.Fprintf(w, "  events           %d checked\n", r.Events)
	fmt.Fprintf(w, "  wall             %s (setup %s, turns %s)\n", r.Wall.Round(100*time.Millisecond), r.Setup.Round(100*time.Millisecond), r.Drive.Round(100*time.Millisecond))
	fmt.Fprintln(w)
	r.PrintTable(w)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  violations       %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "    - %s\n", v)
	}
	if !r.OK() {
		fmt.Fprintf(w, "  kept             work dir %s, database %s\n", r.WorkDir, r.Database)
	}
}

// tableClasses are the table's problem columns, in order.
var tableClasses = []string{classUndelivered, classLost, classDuplicated, classSideEffect, classTurnFailed, classUsage, classOther}

// PrintTable writes, per kill point and per outage length, the calls in
// flight during such an event (a call can count in several rows) and how
// many of them had each problem. "none" is the calls no event touched.
func (r *Report) PrintTable(w io.Writer) {
	type row struct {
		events int
		calls  map[*call]bool
	}
	rows := map[string]*row{}
	get := func(name string) *row {
		if rows[name] == nil {
			rows[name] = &row{calls: map[*call]bool{}}
		}
		return rows[name]
	}
	touched := map[*call]bool{}
	for _, ev := range r.Chaos {
		rw := get(ev.row())
		rw.events++
		for _, c := range r.Calls {
			if !c.Start.After(ev.End) && !c.End.Before(ev.At) {
				rw.calls[c] = true
				touched[c] = true
			}
		}
	}
	none := get("none")
	for _, c := range r.Calls {
		if !touched[c] {
			none.calls[c] = true
		}
	}
	all := get("total")
	all.events = len(r.Chaos)
	for _, c := range r.Calls {
		all.calls[c] = true
	}
	var names []string
	for _, p := range KillPoints {
		if rows["kill "+p] != nil {
			names = append(names, "kill "+p)
		}
	}
	var outs []time.Duration
	for _, ev := range r.Chaos {
		if ev.Point == "" && !slices.Contains(outs, ev.Down) {
			outs = append(outs, ev.Down)
		}
	}
	slices.Sort(outs)
	for _, d := range outs {
		names = append(names, "db outage "+d.String())
	}
	names = append(names, "none", "total")

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "point\tevents\tcalls\t")
	for _, cl := range tableClasses {
		fmt.Fprintf(tw, "%s\t", cl)
	}
	fmt.Fprint(tw, "mcp repeats\t\n")
	for _, name := range names {
		rw := rows[name]
		counts := map[string]int{}
		repeats := 0
		for c := range rw.calls {
			for cl := range r.Problems[c] {
				counts[cl]++
			}
			if c.MCPCalls > 1 {
				repeats++
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t", name, rw.events, len(rw.calls))
		for _, cl := range tableClasses {
			fmt.Fprintf(tw, "%d\t", counts[cl])
		}
		fmt.Fprintf(tw, "%d\t\n", repeats)
	}
	_ = tw.Flush()
	if r.Untied > 0 {
		fmt.Fprintf(w, "  (%d violations concern no single call: see the list)\n", r.Untied)
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
