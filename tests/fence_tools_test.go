package tests

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/activities"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/workflows"
)

// Server-side tool outcomes and compaction are fenced by their turn as a
// provider attempt is (docs/benchmarks.md, "Chaos", finding 2): a run of
// the step on a worker Temporal gave up on, still going after an
// interrupt and a later turn, stores nothing. Each test holds the step's
// side effect on both workers, interrupts the turn (which the live
// worker's run obeys and the stale one, on its own Activities, never
// hears of), answers the next turn, then lets the stale run finish.

// staleWorker is the server's activities as a second replica has them,
// with its tools.
func staleWorker(e *env) *activities.Activities {
	a := otherWorker(e)
	a.MCP, a.Sandbox = e.srv.Parts.Activities.MCP, e.srv.Parts.Activities.Sandbox
	return a
}

// gate holds a side effect until released or its caller's context ends,
// as a slow or partitioned worker would; entered delivers each arrival.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newGate() gate { return gate{entered: make(chan struct{}, 8), release: make(chan struct{})} }

func (g gate) hold(ctx context.Context) error {
	g.entered <- struct{}{}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// heldExecs holds every sandbox exec at its gate before running it.
type heldExecs struct {
	activities.SandboxExecer
	gate
}

func (h *heldExecs) ExecOnce(ctx context.Context, id string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if err := h.hold(ctx); err != nil {
		return sandbox.ExecResult{}, err
	}
	return h.SandboxExecer.ExecOnce(ctx, id, req)
}

// heldMCP holds every MCP tool call at its gate before making it.
type heldMCP struct {
	activities.MCPCaller
	gate
}

func (h *heldMCP) CallTool(ctx context.Context, sessionID, server, tool string, input json.RawMessage) (json.RawMessage, error) {
	if err := h.hold(ctx); err != nil {
		return nil, err
	}
	return h.MCPCaller.CallTool(ctx, sessionID, server, tool, input)
}

// interruptAndMoveOn interrupts turn (its stream ends without an error),
// then answers the next message: the session moved on from turn.
func interruptAndMoveOn(t *testing.T, d *driver, st *testenv.Stream, turn string) {
	t.Helper()
	res := result(t, d.call("session.interrupt", map[string]any{"turnId": turn}))
	require.Equal(t, true, res["interrupted"], "%v", res)
	end := terminal(t, st)
	require.Nil(t, end["error"], "%v", end["error"])
	st.Close()
	_, next := d.send("next one")
	require.Nil(t, next["error"], "%v", next["error"])
	require.Equal(t, "echo: next one", firstText(message(next)))
}

// requireNothingAfterInterrupt checks that the interrupted turn stored
// nothing after its end, and nothing of the given types at all.
func requireNothingAfterInterrupt(t *testing.T, e *env, sid, turn string, never ...string) {
	t.Helper()
	typesA := turnEventTypes(t, e, sid, turn)
	require.NotEmpty(t, typesA)
	assert.Equal(t, "server.message.interrupted", typesA[len(typesA)-1], "nothing of the interrupted turn after its end: %v", typesA)
	for _, typ := range never {
		assert.NotContains(t, typesA, typ, "the stale run stored its outcome")
	}
	texts := conversationTexts(t, e, sid)
	assert.Equal(t, "echo: next one", texts[len(texts)-1], "the next turn's answer ends the conversation")
}

// The chaos shape (seed 16060992088162434347): a sandbox exec of a turn
// that was interrupted and followed by another turn finishes on a worker
// Temporal gave up on. Its sandbox.response is not stored; the interrupt's
// result for the call stands. Seen red with the tool outcome's fence
// removed (toolTx without tx.Fence): the sandbox.response was stored after
// the next turn's answer.
func TestStaleSandboxResultStoresNothing(t *testing.T) {
	image := buildImages(t, 1)[0]
	held := &heldExecs{gate: newGate()}
	e := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		held.SandboxExecer = p.Activities.Sandbox
		p.Activities.Sandbox = held
		return nil
	})
	pid := e.profile(map[string]any{"available_sandboxes": []string{image}})
	e.waitProvisioned(pid, image)
	d := e.openOn(pid, map[string]any{"sandbox_tools": []any{shellTool}})
	d.reapOnCleanup()
	d.register()
	result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_late", "run_shell_command", map[string]any{"command": "echo late; exit 137"}))
	st := d.stream(ctx, "run it")
	waitFor(t, held.entered, "the live worker's exec")
	ids := turnIDs(t, e, d.sid)
	turnA := ids[len(ids)-1]

	// The same call on a worker Temporal gave up on.
	stale := make(chan error, 1)
	go func() {
		_, err := staleWorker(e).ExecSandbox(ctx, workflows.ToolCallInput{
			TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID},
			Call:    workflows.ToolCall{ID: "tu_late", Name: "run_shell_command", Dispatch: events.DispatchSandbox},
		})
		stale <- err
	}()
	waitFor(t, held.entered, "the stale worker's exec")

	interruptAndMoveOn(t, d, st, turnA)
	close(held.release)
	require.NoError(t, <-stale, "the interrupt's result for the call stands")

	requireNothingAfterInterrupt(t, e, d.sid, turnA, "sandbox.response")
	requireValidNextTurn(t, e, d, "primary")
}

// The same with an MCP tool: the stale run's call answers after the next
// turn; its mcp.response is not stored. Seen red with the tool outcome's
// fence removed: the mcp.response was stored after the next turn's answer.
func TestStaleMCPResultStoresNothing(t *testing.T) {
	e, d, held := openHeldMCP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_late", "list_files", map[string]any{"path": "/data"}))
	st := d.stream(ctx, "list them")
	waitFor(t, held.entered, "the live worker's MCP call")
	ids := turnIDs(t, e, d.sid)
	turnA := ids[len(ids)-1]

	stale := make(chan error, 1)
	go func() {
		_, err := staleWorker(e).CallMCPTool(ctx, workflows.ToolCallInput{
			TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID},
			Call:    workflows.ToolCall{ID: "tu_late", Name: "list_files", Dispatch: events.DispatchMCP, Server: "fs"},
		})
		stale <- err
	}()
	waitFor(t, held.entered, "the stale worker's MCP call")

	interruptAndMoveOn(t, d, st, turnA)
	close(held.release)
	require.NoError(t, <-stale, "the interrupt's result for the call stands")

	requireNothingAfterInterrupt(t, e, d.sid, turnA, "mcp.response")
	requireValidNextTurn(t, e, d, "primary")
}

// A compaction of a turn that was interrupted and followed by another
// turn, whose summarizer answers on a worker Temporal gave up on, stores
// no summary and no session.compaction (TurnSuperseded); one started after
// that calls no summarizer. Seen red with the compaction's fences removed
// (checkFence and the stores' tx.Fence): the stale summary was stored, and
// the later run summarized the later conversation for the old turn.
func TestStaleCompactionStoresNothing(t *testing.T) {
	e, _, pid := newCompactionEnv(t, "anthropic", windowTokens, map[string]any{})
	d := e.openOn(pid, nil)
	d.register()
	for i := range 3 {
		_, term := d.send(userText(i))
		require.Nil(t, term["error"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The turn's own call hangs; the stale compaction's summarizer call is
	// held until the session moved on.
	const marker = "compact me later"
	live, summarizer := make(chan struct{}, 1), newGate()
	e.fake.OnRequest(func(rec fakeprovider.Recorded) {
		switch {
		case summarizing(rec):
			_ = summarizer.hold(ctx)
		case strings.Contains(rec.LastUserText(), marker):
			select {
			case live <- struct{}{}:
			default:
			}
		}
	})
	defer e.fake.OnRequest(nil)
	e.fake.Lane("small").Enqueue(fakeprovider.Text("held answer").UntilReleased())
	st := d.stream(ctx, marker)
	waitFor(t, live, "the turn's provider call")
	ids := turnIDs(t, e, d.sid)
	turnA := ids[len(ids)-1]
	in := workflows.CompactContextInput{
		TurnRef:  workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID},
		Provider: "small", Providers: []string{"small"}, Harder: true,
	}

	stale := make(chan error, 1)
	go func() { stale <- staleWorker(e).CompactContext(ctx, in) }()
	waitFor(t, summarizer.entered, "the stale summarizer call")

	interruptAndMoveOn(t, d, st, turnA)
	close(summarizer.release)
	requireSuperseded(t, <-stale)

	calls := 0
	for _, rec := range e.fake.Requests() {
		if summarizing(rec) {
			calls++
		}
	}
	in.Retry = 1
	requireSuperseded(t, staleWorker(e).CompactContext(ctx, in))
	after := 0
	for _, rec := range e.fake.Requests() {
		if summarizing(rec) {
			after++
		}
	}
	assert.Equal(t, calls, after, "a superseded compaction called the summarizer")

	n, err := e.srv.Parts.Store.CountSummaries(context.Background(), d.sid)
	require.NoError(t, err)
	assert.Zero(t, n, "a superseded compaction stored a summary")
	assert.Empty(t, ofType(d.allEvents(), "session.compaction"), "a superseded compaction stored its event")
	requireNothingAfterInterrupt(t, e, d.sid, turnA)
	e.fake.Release()
}

// The live workflow's own tool call finds its turn superseded: an
// interrupt stored by a run of the turn this history does not hold closes
// the call while its MCP call is out. The interrupt's result for the call
// stands, and the iteration's end finds the conversation moved on: the
// turn ends failed at "superseded" with nothing more stored, no results
// message after the interrupt's and no further provider call. Recorded as
// superseded_tool.json (BAE_RECORD_HISTORY=1). Seen red with
// FinishIteration's fence removed (the results were appended after the
// interrupt's kept text and the next iteration's provider call made).
func TestSupersededToolTurnEndsWithNothingStored(t *testing.T) {
	e, d, held := openHeldMCP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "list_files", map[string]any{"path": "/data"}))
	st := d.stream(ctx, "list them")
	defer st.Close()
	waitFor(t, held.entered, "the MCP call")
	ids := turnIDs(t, e, d.sid)
	turnA := ids[len(ids)-1]

	ires, err := otherWorker(e).InterruptTurn(ctx, workflows.InterruptTurnInput{
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID}, By: d.keyID,
	})
	require.NoError(t, err)
	require.Empty(t, ires.Outcome, "%+v", ires)
	before, calls := turnEventTypes(t, e, d.sid, turnA), len(e.fake.Requests())

	close(held.release)
	term := terminal(t, st)
	assert.Contains(t, rpcError(t, term, -32603), workflows.StepSuperseded)
	assert.Equal(t, before, turnEventTypes(t, e, d.sid, turnA), "the superseded turn stored nothing more")
	assert.Equal(t, calls, len(e.fake.Requests()), "the superseded turn called the provider again")
	texts := conversationTexts(t, e, d.sid)
	assert.Equal(t, events.InterruptedText, texts[len(texts)-1], "the interrupt's kept text ends the conversation")

	requireValidNextTurn(t, e, d, "primary")
	d.closeSession()
	recordAndReplay(t, e, d.sid, "superseded_tool")
}

// A tool call's run that starts after its turn was taken out of the
// conversation (a failed turn's repair by a run of the turn this history
// does not hold) calls nothing; the live run, whose MCP call was out,
// stores nothing and the turn ends failed at "superseded". Seen red with
// the tool request's fence removed (the stale run made its MCP call).
func TestStaleToolRunAfterTurnTakenOutCallsNothing(t *testing.T) {
	e, d, held := openHeldMCP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "list_files", map[string]any{"path": "/data"}))
	st := d.stream(ctx, "list them")
	defer st.Close()
	waitFor(t, held.entered, "the live worker's MCP call")
	ids := turnIDs(t, e, d.sid)
	turnA := ids[len(ids)-1]
	takeOut(t, ctx, e, d.sid, turnA)
	before := turnEventTypes(t, e, d.sid, turnA)

	stale := make(chan error, 1)
	go func() {
		_, err := staleWorker(e).CallMCPTool(ctx, workflows.ToolCallInput{
			TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID},
			Call:    workflows.ToolCall{ID: "tu_1", Name: "list_files", Dispatch: events.DispatchMCP, Server: "fs"},
		})
		stale <- err
	}()
	select {
	case err := <-stale:
		requireSuperseded(t, err)
	case <-held.entered:
		require.FailNow(t, "the stale run made its MCP call")
	}

	close(held.release)
	term := terminal(t, st)
	assert.Contains(t, rpcError(t, term, -32603), workflows.StepSuperseded)
	assert.Equal(t, before, turnEventTypes(t, e, d.sid, turnA), "the superseded turn stored nothing more")
	requireValidNextTurn(t, e, d, "primary")
}

// openHeldMCP opens a registered session on a profile with the stdio MCP
// server "fs", whose calls wait at held's gate.
func openHeldMCP(t *testing.T) (*env, *driver, *heldMCP) {
	held := &heldMCP{gate: newGate()}
	e := newEnvWith(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")}, func(p *app.Parts) error {
		held.MCPCaller = p.Activities.MCP
		p.Activities.MCP = held
		return nil
	})
	pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}})
	d := e.openOn(pid, nil)
	d.register()
	return e, d, held
}
