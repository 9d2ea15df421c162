package chaoslib

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/workflows"
)

// Input is everything the checks read: the databases, what the clients
// saw, what the fake provider and the MCP servers received, and the
// replicas' runtime samples. Check is a pure function of it, so -break can
// corrupt a copy to see an invariant fire.
type Input struct {
	Sessions []*SessionInput
	Faults   []faultEvent
	// Requests is the content of every request the fake provider received
	// (summarizer requests left out): the messages as sent upstream.
	Requests [][]map[string]any
	// ProviderServed is how many requests the fake answered in all.
	ProviderServed int
	MCPHTTP        map[string][]mcpCall
	MCPStdio       map[string][]mcpCall
	Samples        []sample
	// Profiles are the goroutine profiles of replica incarnations whose
	// goroutines grew (profileKey).
	Profiles map[string]*replicaProfiles
	// Unbegun are turn_inputs rows never begun: stored messages no turn ran.
	Unbegun []string
	// Duration is how long the campaign drove turns.
	Duration time.Duration
}

// SessionInput is one session's side of the Input.
type SessionInput struct {
	N        int
	ID       string
	Closed   bool // the campaign closed it at the end
	Sandbox  bool
	Events   []logEvent
	Calls    []*call
	Observed [][]seenEvent
	Control  *workflows.ControlView
	CtlErr   string
	// SandboxRuns is each sandbox counter's runs (tag -> runs).
	SandboxRuns map[string]int
	// UsageCalls / UsageCallsSum are the usage_calls rows; UsageTotals
	// the usage_totals sum.
	UsageCalls    int64
	UsageCallsSum provider.Usage
	UsageTotals   provider.Usage
}

// logEvent is one row of session_events.
type logEvent struct {
	Seq     int64
	ID      string
	TurnID  string
	Type    string
	Payload json.RawMessage
	At      time.Time
}

func (r *run) control(ctx context.Context, sessionID string) (*workflows.ControlView, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := r.tc.QueryWorkflow(ctx, sessionID, "", workflows.QueryControl)
	if err != nil {
		return nil, err
	}
	var cv workflows.ControlView
	if err := resp.Get(&cv); err != nil {
		return nil, err
	}
	return &cv, nil
}

// readSandboxes reads every sandbox counter (before sessions close, which
// stops their containers).
func (r *run) readSandboxes(ctx context.Context) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, s := range r.sessions {
		if s.sandbox == "" {
			continue
		}
		m, err := benchstack.SandboxCounts(ctx, s.sandbox, counterDir)
		if err != nil {
			r.o.Log.Warn("sandbox counters", "session", s.n, "err", err)
			continue
		}
		out[s.id] = m
	}
	return out
}

func (r *run) collect(ctx context.Context, closed map[string]bool, boxes map[string]map[string]int, drive time.Duration) (*Input, error) {
	conn, err := pgx.Connect(ctx, r.topo.db.URL)
	if err != nil {
		return nil, fmt.Errorf("connect to the run's database: %w", err)
	}
	defer conn.Close(ctx)
	in := &Input{MCPHTTP: r.mcp.snapshot(), Samples: r.samples.samples, Profiles: r.samples.profiles.by, Duration: drive}
	if in.MCPStdio, err = readStdioCalls(r.stdioFile); err != nil {
		return nil, err
	}
	for _, s := range r.sessions {
		si := &SessionInput{N: s.n, ID: s.id, Closed: closed[s.id], Sandbox: s.sandbox != "", SandboxRuns: boxes[s.id]}
		rows, err := conn.Query(ctx, `SELECT seq, id, coalesce(turn_id, ''), event_type, payload::text, created_at FROM session_events WHERE session_id = $1 ORDER BY seq`, s.id)
		if err != nil {
			return nil, err
		}
		si.Events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (logEvent, error) {
			var e logEvent
			var p string
			err := row.Scan(&e.Seq, &e.ID, &e.TurnID, &e.Type, &p, &e.At)
			e.Payload = json.RawMessage(p)
			return e, err
		})
		if err != nil {
			return nil, err
		}
		for _, d := range s.drivers {
			si.Calls = append(si.Calls, d.snapshot()...)
		}
		for _, o := range s.observers {
			si.Observed = append(si.Observed, o.snapshot())
		}
		if si.Control, err = r.control(ctx, s.id); err != nil {
			si.CtlErr = err.Error()
		}
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
			coalesce(sum(cache_read_tokens), 0), coalesce(sum(cache_write_tokens), 0) FROM usage_calls WHERE session_id = $1`, s.id).
			Scan(&si.UsageCalls, &si.UsageCallsSum.Input, &si.UsageCallsSum.Output, &si.UsageCallsSum.CacheRead, &si.UsageCallsSum.CacheWrite); err != nil {
			return nil, err
		}
		if err := conn.QueryRow(ctx, `SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
			coalesce(sum(cache_read_tokens), 0), coalesce(sum(cache_write_tokens), 0) FROM usage_totals WHERE session_id = $1`, s.id).
			Scan(&si.UsageTotals.Input, &si.UsageTotals.Output, &si.UsageTotals.CacheRead, &si.UsageTotals.CacheWrite); err != nil {
			return nil, err
		}
		in.Sessions = append(in.Sessions, si)
	}
	rows, err := conn.Query(ctx, `SELECT turn_id || ' (session ' || session_id || ', stored ' || created_at::text || '): ' || left(message::text, 200) FROM turn_inputs WHERE begin_result IS NULL`)
	if err != nil {
		return nil, err
	}
	if in.Unbegun, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, err
	}
	for _, rec := range r.fake.Requests() {
		if isSummarizing(rec.LastUserText()) {
			continue
		}
		in.Requests = append(in.Requests, rec.Messages())
	}
	in.ProviderServed = r.fake.RequestCount()
	return in, nil
}
