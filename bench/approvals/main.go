// Command approvals measures what issue 37 asks of approvals: that
// -sessions sessions, each paused on an approval, cost no workflow task, no
// activity and no goroutine per session while they wait; how much memory
// and database each pending approval takes; and how long from a decision
// to the tool running, beside a client tool's resume in the same run.
//
// One process holds the stack (a throwaway database, an in-memory embedded
// Temporal, baesrv), a fake provider and an MCP server whose one tool the
// profile's policy holds for approval. Each session sends one message the
// fake answers with a call of that tool; the bench reads the turn's stream
// (opted in with Bae-Approvals: on) until its session.approvalRequest and
// closes it, so no client connection is held during the wait. Then:
//
//   - wait window: -window long, with every session paused. Temporal's
//     history of every session counts the workflow tasks, activities and
//     timers started inside it; the process's goroutines and heap are read
//     before the sessions pause (open and idle) and during the wait, and
//     the database's size likewise.
//
//   - decisions: -measure approvals are approved one at a time through the
//     admin API; timed to the MCP tool running (the MCP server sees the
//     call) and to the provider's next request (the turn resumed).
//
//   - client tools, same sessions: a turn ends on a client tool's call; the
//     client posts its result; timed to the provider's next request.
//
//     go run ./bench/approvals                       # 10,000 sessions
//     go run ./bench/approvals -sessions 1000 -measure 100
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/sdk"
)

const (
	mcpServerName = "benchmcp"
	mcpTool       = "bench_write"
	clientTool    = "bench_client"
)

type options struct {
	sessions, measure, concurrency int
	stickyCache                    int
	window, pauseTimeout           time.Duration
	db                             string
	heapProfiles                   string
	verbose                        bool
}

func main() {
	var o options
	flag.IntVar(&o.sessions, "sessions", 10000, "sessions, each paused on one approval during the wait window")
	flag.IntVar(&o.measure, "measure", 100, "approvals decided one at a time and timed, and as many client-tool resumes")
	flag.IntVar(&o.concurrency, "concurrency", 16, "parallel opens and pausing turns")
	flag.DurationVar(&o.window, "window", 30*time.Second, "how long every session waits, paused, while the bench counts what runs")
	flag.DurationVar(&o.pauseTimeout, "pause-timeout", 2*time.Minute, "how long one turn may take to reach its approval request")
	flag.StringVar(&o.db, "db", benchstack.DefaultDatabaseURL(), "maintenance database URL")
	flag.IntVar(&o.stickyCache, "sticky-cache", 0, "BAE_WORKFLOW_CACHE_SIZE, the workflows baesrv's worker keeps loaded (0: the server's default, 10,000); a smaller cache evicts paused workflows, which then hold no goroutine at all")
	flag.StringVar(&o.heapProfiles, "heap-profiles", "", "a directory to write heap profiles into, open and idle (idle.pprof) and paused (paused.pprof): go tool pprof -base idle.pprof paused.pprof says what a pending approval holds")
	flag.BoolVar(&o.verbose, "v", false, "show baesrv/Temporal warnings")
	flag.Parse()
	o.measure = min(o.measure, o.sessions)
	benchstack.Main("approvals", func(ctx context.Context, log *slog.Logger) error { return run(ctx, log, o) })
}

// clock notes when something named happened, and lets a waiter block
// until it has.
type clock struct {
	mu   sync.Mutex
	at   map[string]time.Time
	wait map[string]chan struct{}
}

func newClock() *clock { return &clock{at: map[string]time.Time{}, wait: map[string]chan struct{}{}} }

func (c *clock) ch(name string) chan struct{} {
	ch, ok := c.wait[name]
	if !ok {
		ch = make(chan struct{})
		c.wait[name] = ch
	}
	return ch
}

func (c *clock) mark(name string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.at[name]; ok {
		return
	}
	c.at[name] = now
	close(c.ch(name))
}

// since waits for name and returns how long after t0 it happened.
func (c *clock) since(ctx context.Context, name string, t0 time.Time) (time.Duration, error) {
	c.mu.Lock()
	ch := c.ch(name)
	c.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for %s: %w", name, ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[name].Sub(t0), nil
}

// fake answers "approve <tag>" with a call of the held MCP tool, "client
// <tag>" with a call of the client tool, and a tool result with "done"; it
// notes when a request carrying a tool's result arrives (the turn resumed).
func fake(resumed *clock) *fakeprovider.Server {
	f := fakeprovider.NewHandler()
	f.OnRequest(func(rec fakeprovider.Recorded) {
		if id := lastToolResultID(rec); id != "" {
			resumed.mark(id)
		}
	})
	f.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if rec.HasToolResult() {
			return fakeprovider.Text("done")
		}
		text := rec.LastUserText()
		if tag, ok := strings.CutPrefix(text, "approve "); ok {
			return fakeprovider.ToolUse("tu_"+tag, mcpTool, map[string]any{"id": tag})
		}
		if tag, ok := strings.CutPrefix(text, "client "); ok {
			return fakeprovider.ToolUse("tu_"+tag, clientTool, map[string]any{"id": tag})
		}
		return fakeprovider.Text("ok")
	})
	return f
}

// lastToolResultID is the tool_use_id of a tool_result in the request's
// last message, if any.
func lastToolResultID(rec fakeprovider.Recorded) string {
	msgs := rec.Messages()
	if len(msgs) == 0 {
		return ""
	}
	blocks, _ := msgs[len(msgs)-1]["content"].([]any)
	for _, b := range blocks {
		if block, ok := b.(map[string]any); ok && block["type"] == "tool_result" {
			id, _ := block["tool_use_id"].(string)
			return id
		}
	}
	return ""
}

// startMCP serves the held tool, noting when each call runs.
func startMCP(ran *clock) (string, func(), error) {
	s := server.NewMCPServer("bench-approvals", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool(mcpTool, mcp.WithDescription("Writes a record; held for approval."), mcp.WithString("id", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			id, err := req.RequireString("id")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			ran.mark(id)
			return mcp.NewToolResultText("written " + id), nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("mcp listen: %w", err)
	}
	srv := &http.Server{Handler: server.NewStreamableHTTPServer(s, server.WithStateLess(true)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/mcp", func() { _ = srv.Close() }, nil
}

// snapshot is the process and database at one moment.
type snapshot struct {
	goroutines int
	heap       uint64 // HeapInuse after a GC
	live       uint64 // HeapAlloc after a GC: the live objects
	rss        uint64 // the process's resident memory (the in-memory Temporal's SQLite is outside Go's heap)
	dbBytes    int64
	// pgConns are the bench database's server connections (baesrv's pool;
	// the snapshot's own is not counted); poolConns is baesrv's pool as it
	// sees itself (total, of which acquired).
	pgConns             int
	poolConns, poolBusy int32
	// byKind counts goroutines by what holds them (goroutineKind).
	byKind map[string]int
}

// goroutineKinds attribute a goroutine to what holds it, by the first
// of these its stack mentions.
var goroutineKinds = []struct{ kind, marker string }{
	{"Temporal workflow coroutines (worker's sticky cache)", "go.temporal.io/sdk/internal.(*coroutineState)"},
	{"Temporal server", "go.temporal.io/server/"},
	{"Temporal SDK (pollers, gRPC)", "go.temporal.io/"},
	{"gRPC", "google.golang.org/grpc"},
	{"MCP clients", "mark3labs/mcp-go"},
	{"PostgreSQL pool", "jackc/"},
	{"HTTP", "net/http"},
}

// goroutinesByKind reads every goroutine's stack and counts them by kind.
func goroutinesByKind() map[string]int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	out := map[string]int{}
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		var n int
		if _, err := fmt.Sscanf(rec, "%d @", &n); err != nil {
			continue
		}
		kind := "other"
		for _, k := range goroutineKinds {
			if strings.Contains(rec, k.marker) {
				kind = k.kind
				break
			}
		}
		out[kind] += n
	}
	return out
}

// residentBytes is VmRSS from /proc/self/status (0 where there is none).
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// writeHeap writes a heap profile to dir/name.pprof (nothing without dir).
func writeHeap(dir, name string) error {
	if dir == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

func take(ctx context.Context, dbURL string, pool *pgxpool.Pool) (snapshot, error) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := snapshot{goroutines: runtime.NumGoroutine(), heap: ms.HeapInuse, live: ms.HeapAlloc, rss: residentBytes(), byKind: goroutinesByKind()}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return s, fmt.Errorf("connect to the bench database: %w", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&s.dbBytes); err != nil {
		return s, fmt.Errorf("database size: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").Scan(&s.pgConns); err != nil {
		return s, fmt.Errorf("database connections: %w", err)
	}
	if pool != nil {
		st := pool.Stat()
		s.poolConns, s.poolBusy = st.TotalConns(), st.AcquiredConns()
	}
	return s, nil
}

type paused struct {
	s          *sdk.Session
	tag        string
	approvalID string
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	ran, resumed := newClock(), newClock()
	f := fake(resumed)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the fake provider: %w", err)
	}
	fsrv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go fsrv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed
	defer fsrv.Close()
	mcpURL, stopMCP, err := startMCP(ran)
	if err != nil {
		return err
	}
	defer stopMCP()
	var srvLog *slog.Logger
	if o.verbose {
		srvLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	calls := &temporalCalls{}
	st, err := benchstack.StartInProc(ctx, log, benchstack.InProcOptions{
		BaseDatabaseURL: o.db, ServerLog: srvLog, TemporalInterceptors: []interceptor.ClientInterceptor{calls},
		Env: cacheEnv(o.stickyCache),
		ConfigTOML: benchstack.ProviderTOML("http://"+ln.Addr().String()) +
			fmt.Sprintf("\n[[mcp.servers]]\nname = %q\ntransport = \"http\"\nurl = %q\n", mcpServerName, mcpURL),
	})
	if err != nil {
		return err
	}
	defer st.Close()
	key, err := st.Admin.Setup(ctx, map[string]any{
		"name": "approvals", "primary_provider": "fake", "mcp_servers": []string{mcpServerName}, "allowed_tools": []string{clientTool},
		"approvals": map[string]any{"rules": []any{map[string]any{
			"kind": "mcp", "server": mcpServerName, "tool": mcpTool, "deciders": "any_driver", "timeout": "720h", "on_timeout": "reject",
		}}},
	})
	if err != nil {
		return err
	}
	hc := benchstack.HTTPClient(o.concurrency)
	cfg := sdk.Config{ServerURL: st.ClientURL, ClientKey: key, HTTPClient: hc, ClientVersion: "bae-bench", Logger: slog.New(slog.DiscardHandler)}
	tool := sdk.WithTool(sdk.Tool{Name: clientTool, Description: "The bench answers it itself.",
		InputSchema: map[string]any{"type": "object"},
		Handler:     func(context.Context, json.RawMessage) (any, error) { return "ok", nil }})

	start, err := take(ctx, st.DB.URL, st.Parts.Store.Pool)
	if err != nil {
		return err
	}
	log.Info("opening sessions", "sessions", o.sessions, "concurrency", o.concurrency)
	sessions := make([]*paused, o.sessions)
	if err := parallel(ctx, o.sessions, o.concurrency, progress(log, "opened", o.sessions), func(ctx context.Context, i int) error {
		s, err := sdk.Connect(ctx, cfg, tool)
		if err != nil {
			return err
		}
		sessions[i] = &paused{s: s, tag: fmt.Sprintf("a%06d", i)}
		// One plain turn, so the idle baseline has what any used session
		// has (its MCP client connected, its workflow run and cached).
		_, err = benchstack.PostRPCResult(ctx, hc, st.ClientURL, s.ID, s.Key(), "session.sendMessage", benchstack.UserMessage("hello"))
		return err
	}); err != nil {
		return fmt.Errorf("open sessions: %w", err)
	}
	idle, err := take(ctx, st.DB.URL, st.Parts.Store.Pool)
	if err != nil {
		return err
	}
	if err := writeHeap(o.heapProfiles, "idle"); err != nil {
		return err
	}
	log.Info("pausing a turn of each session on an approval")
	t0 := time.Now()
	if err := parallel(ctx, o.sessions, o.concurrency, progress(log, "paused", o.sessions), func(ctx context.Context, i int) error {
		p := sessions[i]
		id, err := pause(ctx, hc, st.ClientURL, p.s, "approve "+p.tag, o.pauseTimeout)
		p.approvalID = id
		return err
	}); err != nil {
		return fmt.Errorf("pause turns: %w", err)
	}
	pauseTook := time.Since(t0)
	var pending struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := st.Admin.Do(ctx, http.MethodGet, "/admin/v1/approvals?state=pending&limit=1", nil, &pending, http.StatusOK); err != nil {
		return err
	}
	if len(pending.Items) == 0 {
		return errors.New("the admin API lists no pending approval")
	}

	// Let the pausing turns' last workflow tasks finish before the window.
	time.Sleep(2 * time.Second) //nolint:forbidigo // a settle time before measuring, not synchronisation
	before, err := take(ctx, st.DB.URL, st.Parts.Store.Pool)
	if err != nil {
		return err
	}
	winStart := time.Now()
	callsBefore := calls.snapshot()
	log.Info("wait window", "length", o.window)
	select {
	case <-time.After(o.window):
	case <-ctx.Done():
		return ctx.Err()
	}
	winEnd := time.Now()
	inWindow := calls.since(callsBefore)
	during, err := take(ctx, st.DB.URL, st.Parts.Store.Pool)
	if err != nil {
		return err
	}
	if err := writeHeap(o.heapProfiles, "paused"); err != nil {
		return err
	}
	log.Info("reading every session's workflow history")
	var counts windowCounts
	if err := parallel(ctx, o.sessions, o.concurrency, progress(log, "histories read", o.sessions), func(ctx context.Context, i int) error {
		return counts.add(ctx, st.Temporal, sessions[i].s.ID, winStart, winEnd)
	}); err != nil {
		return fmt.Errorf("read histories: %w", err)
	}
	approvalRowBytes, err := tableBytes(ctx, st.DB.URL)
	if err != nil {
		return err
	}

	log.Info("deciding approvals one at a time", "measure", o.measure)
	var toTool, toResume, clientResume []time.Duration
	for _, p := range sessions[:o.measure] {
		t := time.Now()
		if err := st.Admin.Do(ctx, http.MethodPost, "/admin/v1/approvals/"+p.approvalID+"/decision",
			map[string]any{"decision": "approve", "operator": "bench"}, nil, http.StatusOK); err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		d1, err := ran.since(dctx, p.tag, t)
		if err == nil {
			var d2 time.Duration
			d2, err = resumed.since(dctx, "tu_"+p.tag, t)
			toResume = append(toResume, d2)
		}
		cancel()
		if err != nil {
			return err
		}
		toTool = append(toTool, d1)
	}
	log.Info("client-tool resumes on the same sessions", "measure", o.measure)
	for _, p := range sessions[:o.measure] {
		d, err := clientResumeOnce(ctx, hc, st.ClientURL, p.s, "c"+p.tag[1:], resumed)
		if err != nil {
			return err
		}
		clientResume = append(clientResume, d)
	}
	report(os.Stdout, o, pauseTook, start, idle, before, during, &counts, inWindow, approvalRowBytes, toTool, toResume, clientResume)
	return nil
}

// cacheEnv sets baesrv's workflow cache size when the run asks for one.
func cacheEnv(size int) map[string]string {
	if size <= 0 {
		return nil
	}
	return map[string]string{"BAE_WORKFLOW_CACHE_SIZE": fmt.Sprint(size)}
}

// pause sends text on a stream opted into approvals, reads it until the
// turn's session.approvalRequest and closes it.
func pause(ctx context.Context, hc *http.Client, base string, s *sdk.Session, text string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := benchstack.PostRPC(ctx, hc, base, s.ID, s.Key(), 1, "session.sendMessage", benchstack.UserMessage(text), http.Header{sdk.ApprovalsHeader: {"on"}})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if bytes.Contains(line, []byte(`"session.approvalRequest"`)) {
			var n struct {
				Params sdk.ApprovalRequest `json:"params"`
			}
			if err := json.Unmarshal(line, &n); err != nil {
				return "", fmt.Errorf("decode the approval request: %w", err)
			}
			return n.Params.ApprovalID, nil
		}
		if len(bytes.TrimSpace(line)) > 0 && !bytes.HasPrefix(line, []byte(`{"jsonrpc":"2.0","method"`)) {
			return "", fmt.Errorf("the turn ended without an approval request: %.300s", line)
		}
		if err != nil {
			return "", fmt.Errorf("the turn's stream ended without an approval request: %w", err)
		}
	}
}

// clientResumeOnce runs a turn to its client tool call, then times from
// posting the tool's result to the provider's next request.
func clientResumeOnce(ctx context.Context, hc *http.Client, base string, s *sdk.Session, tag string, resumed *clock) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := benchstack.PostRPCResult(ctx, hc, base, s.ID, s.Key(), "session.sendMessage", benchstack.UserMessage("client "+tag)); err != nil {
		return 0, fmt.Errorf("client-tool turn: %w", err)
	}
	result := map[string]any{"message": map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "tool_result", "tool_use_id": "tu_" + tag, "content": "ok"},
	}}}
	t := time.Now()
	resp, err := benchstack.PostRPC(ctx, hc, base, s.ID, s.Key(), 2, "session.sendMessage", result, nil)
	if err != nil {
		return 0, err
	}
	d, err := resumed.since(ctx, "tu_"+tag, t)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return d, err
}

// windowCounts are the history events started inside the wait window,
// summed over every session.
type windowCounts struct {
	workflowTasks, activities, timers, other atomic.Int64
	sessionsWithAny                          atomic.Int64
}

func (w *windowCounts) add(ctx context.Context, c client.Client, workflowID string, from, to time.Time) error {
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	any := false
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return fmt.Errorf("history of %s: %w", workflowID, err)
		}
		at := ev.GetEventTime().AsTime()
		if at.Before(from) || at.After(to) {
			continue
		}
		any = true
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			w.workflowTasks.Add(1)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			w.activities.Add(1)
		case enumspb.EVENT_TYPE_TIMER_STARTED, enumspb.EVENT_TYPE_TIMER_FIRED:
			w.timers.Add(1)
		default:
			w.other.Add(1)
		}
	}
	if any {
		w.sessionsWithAny.Add(1)
	}
	return nil
}

// temporalCalls counts the calls baesrv's Temporal client makes, by
// method: a query is answered by the session's worker without a history
// event, so the histories alone would not show it.
type temporalCalls struct {
	interceptor.ClientInterceptorBase
	mu sync.Mutex
	n  map[string]int64
}

func (c *temporalCalls) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &countingOutbound{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, c: c}
}

func (c *temporalCalls) add(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[method]++
}

func (c *temporalCalls) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// since is the calls made after before was taken.
func (c *temporalCalls) since(before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range c.snapshot() {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

type countingOutbound struct {
	interceptor.ClientOutboundInterceptorBase
	c *temporalCalls
}

func (o *countingOutbound) QueryWorkflow(ctx context.Context, in *interceptor.ClientQueryWorkflowInput) (converter.EncodedValue, error) {
	o.c.add("QueryWorkflow")
	return o.Next.QueryWorkflow(ctx, in)
}

func (o *countingOutbound) SignalWorkflow(ctx context.Context, in *interceptor.ClientSignalWorkflowInput) error {
	o.c.add("SignalWorkflow")
	return o.Next.SignalWorkflow(ctx, in)
}

func (o *countingOutbound) UpdateWorkflow(ctx context.Context, in *interceptor.ClientUpdateWorkflowInput) (client.WorkflowUpdateHandle, error) {
	o.c.add("UpdateWorkflow")
	return o.Next.UpdateWorkflow(ctx, in)
}

func (o *countingOutbound) ExecuteWorkflow(ctx context.Context, in *interceptor.ClientExecuteWorkflowInput) (client.WorkflowRun, error) {
	o.c.add("ExecuteWorkflow")
	return o.Next.ExecuteWorkflow(ctx, in)
}

func (o *countingOutbound) SignalWithStartWorkflow(ctx context.Context, in *interceptor.ClientSignalWithStartWorkflowInput) (client.WorkflowRun, error) {
	o.c.add("SignalWithStartWorkflow")
	return o.Next.SignalWithStartWorkflow(ctx, in)
}

// tableBytes is the approvals table's size with its indexes.
func tableBytes(ctx context.Context, dbURL string) (int64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, fmt.Errorf("connect to the bench database: %w", err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size('approvals')").Scan(&n); err != nil {
		return 0, fmt.Errorf("approvals table size: %w", err)
	}
	return n, nil
}

// parallel runs fn for 0..n-1 on workers goroutines; the first error stops
// the rest.
func parallel(ctx context.Context, n, workers int, done func(), fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := atomic.Int64{}
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				done()
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// progress logs every tenth of n.
func progress(log *slog.Logger, what string, n int) func() {
	var c atomic.Int64
	step := int64(max(1, n/10))
	return func() {
		if v := c.Add(1); v%step == 0 {
			log.Info(what, "n", v, "of", n)
		}
	}
}

func report(w io.Writer, o options, pauseTook time.Duration, start, idle, before, during snapshot, counts *windowCounts, inWindow map[string]int64, approvalRowBytes int64,
	toTool, toResume, clientResume []time.Duration) {
	n := float64(o.sessions)
	cache := "the default workflow cache (BAE_WORKFLOW_CACHE_SIZE unset: 10,000)"
	if o.stickyCache > 0 {
		cache = fmt.Sprintf("BAE_WORKFLOW_CACHE_SIZE=%d", o.stickyCache)
	}
	fmt.Fprintf(w, "\napprovals: %d sessions, each paused on one approval of an MCP tool (paused in %s); one process holds baesrv, an in-memory Temporal and the client; %s\n\n",
		o.sessions, pauseTook.Round(time.Millisecond), cache)
	fmt.Fprintf(w, "wait window of %s, every session paused:\n", o.window)
	fmt.Fprintf(w, "  workflow tasks started      %d\n", counts.workflowTasks.Load())
	fmt.Fprintf(w, "  activities started          %d\n", counts.activities.Load())
	fmt.Fprintf(w, "  timers started or fired     %d\n", counts.timers.Load())
	fmt.Fprintf(w, "  other history events        %d  (sessions with any event in the window: %d)\n", counts.other.Load(), counts.sessionsWithAny.Load())
	fmt.Fprintf(w, "  goroutines at the window's start %d, at its end %d\n", before.goroutines, during.goroutines)
	fmt.Fprintf(w, "  baesrv's calls to Temporal     ")
	if len(inWindow) == 0 {
		fmt.Fprintf(w, "none")
	}
	for _, m := range []string{"QueryWorkflow", "SignalWorkflow", "UpdateWorkflow", "ExecuteWorkflow", "SignalWithStartWorkflow"} {
		if v := inWindow[m]; v > 0 {
			fmt.Fprintf(w, "%s %d (%.2f per session per minute)  ", m, v, float64(v)/n/o.window.Minutes())
		}
	}
	fmt.Fprintf(w, "\n\n")
	fmt.Fprintf(w, "%-34s %12s %12s %12s\n", "", "no session", "open, idle", "paused")
	fmt.Fprintf(w, "%-34s %12d %12d %12d\n", "goroutines (process)", start.goroutines, idle.goroutines, during.goroutines)
	fmt.Fprintf(w, "%-34s %12.1f %12.1f %12.1f\n", "heap in use, MiB (after GC)", mib(start.heap), mib(idle.heap), mib(during.heap))
	fmt.Fprintf(w, "%-34s %12.1f %12.1f %12.1f\n", "heap live objects, MiB", mib(start.live), mib(idle.live), mib(during.live))
	fmt.Fprintf(w, "%-34s %12.1f %12.1f %12.1f\n", "resident memory, MiB", mib(start.rss), mib(idle.rss), mib(during.rss))
	fmt.Fprintf(w, "%-34s %12.1f %12.1f %12.1f\n", "database, MiB", mib(uint64(start.dbBytes)), mib(uint64(idle.dbBytes)), mib(uint64(during.dbBytes)))
	fmt.Fprintf(w, "%-34s %12d %12d %12d\n", "PostgreSQL connections (server)", start.pgConns, idle.pgConns, during.pgConns)
	fmt.Fprintf(w, "%-34s %5d (%3d) %5d (%3d) %5d (%3d)\n", "baesrv's pool (acquired)", start.poolConns, start.poolBusy, idle.poolConns, idle.poolBusy, during.poolConns, during.poolBusy)
	fmt.Fprintf(w, "\nper pending approval (paused − open and idle after one turn, ÷ %d):\n", o.sessions)
	fmt.Fprintf(w, "  goroutines                  %+.3f\n", float64(during.goroutines-idle.goroutines)/n)
	kinds := append([]string{}, "other")
	for _, k := range goroutineKinds {
		kinds = append(kinds, k.kind)
	}
	for _, k := range kinds {
		if d := during.byKind[k] - idle.byKind[k]; d != 0 || during.byKind[k] > 0 {
			fmt.Fprintf(w, "    %-52s %+.3f  (%d → %d)\n", k, float64(d)/n, idle.byKind[k], during.byKind[k])
		}
	}
	fmt.Fprintf(w, "  heap in use                 %+.0f bytes (live objects %+.0f bytes)\n", (float64(during.heap)-float64(idle.heap))/n, (float64(during.live)-float64(idle.live))/n)
	fmt.Fprintf(w, "  resident memory             %+.0f bytes\n", (float64(during.rss)-float64(idle.rss))/n)
	fmt.Fprintf(w, "  database                    %+.0f bytes (the paused turn's events and its approvals row; the approvals table alone: %.0f bytes)\n",
		float64(during.dbBytes-idle.dbBytes)/n, float64(approvalRowBytes)/n)
	line := func(name string, ds []time.Duration) benchstack.Dist {
		d := benchstack.Summarise(ds)
		fmt.Fprintf(w, "  %-50s p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms\n", name, d.P50, d.P99, d.Max)
		return d
	}
	fmt.Fprintf(w, "\nresume, one at a time (%d each), with %d other approvals pending:\n", len(toTool), o.sessions-len(toTool))
	if o.stickyCache > 0 && o.sessions-len(toTool) >= o.stickyCache {
		// The decided sessions paused first: the cache has since filled with
		// at least a cache's worth of later ones.
		fmt.Fprintf(w, "  (the decided sessions' workflows were evicted before their decision: each resume replays its history)\n")
	}
	line("approval: decision → the MCP tool runs", toTool)
	a := line("approval: decision → provider's next request", toResume)
	c := line("client tool: result posted → provider's next request", clientResume)
	if c.P50 > 0 && c.P99 > 0 {
		fmt.Fprintf(w, "\napproval ÷ client tool (to the provider's next request): p50 %.2f×, p99 %.2f×\n", a.P50/c.P50, a.P99/c.P99)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
