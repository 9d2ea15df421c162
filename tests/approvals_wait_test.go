package tests

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/workflows"
)

// heldWaitEngine counts the API's Control queries to session workflows
// and, when queue is set, refuses every SendIdle Update so turns go
// through the Enqueue signal and the checked wait (as on a busy session).
type heldWaitEngine struct {
	api.Engine
	queue    bool
	controls atomic.Int32
}

func (e *heldWaitEngine) SendIdle(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) (workflows.TurnResult, bool, error) {
	if e.queue {
		return workflows.TurnResult{}, true, nil
	}
	return e.Engine.SendIdle(ctx, ref, in)
}

func (e *heldWaitEngine) Control(ctx context.Context, sessionID string) (workflows.ControlView, error) {
	e.controls.Add(1)
	return e.Engine.Control(ctx, sessionID)
}

// heldWaitEnv is approvalEnv with the API's engine wrapped.
func heldWaitEnv(t *testing.T, queue bool) (*env, string, *heldWaitEngine) {
	t.Helper()
	w := &heldWaitEngine{queue: queue}
	e := newEnvWith(t, envOpts{allowedTools: []string{}, extraTOML: fsStdioTOML(t, "fs")}, func(p *app.Parts) error {
		w.Engine = p.Deps.Engine
		p.Deps.Engine = w
		p.Deps.IdleUpdate = true
		return nil
	})
	e.fake.Strict(true)
	pid := e.profile(map[string]any{"mcp_servers": []string{"fs"}, "approvals": map[string]any{"rules": []any{
		map[string]any{"kind": "mcp", "server": "fs", "tool": "create_*"}}}})
	return e, pid, w
}

// turnWaits counts this process's goroutines waiting for a turn's result
// for a sendMessage stream.
func turnWaits() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("api.(*clientAPI).runTurn(")) || bytes.Contains(g, []byte("api.(*clientAPI).awaitBegunTurn(")) {
			n++
		}
	}
	return n
}

// TestApprovalDisconnectedClientLeavesNoWait: a client that closes its
// sendMessage stream while the turn is held on an approval leaves no
// goroutine waiting for the turn's result, whether the turn went as a
// SendIdle Update or an Enqueue signal; the turn still ends once decided,
// and a resend under the same Idempotency-Key reads its result.
func TestApprovalDisconnectedClientLeavesNoWait(t *testing.T) {
	for _, queue := range []bool{false, true} {
		name := map[bool]string{false: "send_idle", true: "enqueue"}[queue]
		t.Run(name, func(t *testing.T) {
			e, pid, _ := heldWaitEnv(t, queue)
			d := e.openDriver(pid)
			e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Filed."))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			hdr := http.Header{"Bae-Approvals": {"on"}, "Idempotency-Key": {"held-" + name}}
			st := e.srv.RPCStreamHeader(t, ctx, d.sid, d.sk, d.request("file it"), hdr)
			seen := until(t, st, isMethod("session.approvalRequest"))
			id := seen[len(seen)-1]["params"].(map[string]any)["approval_id"].(string)
			require.Equal(t, 1, turnWaits(), "the connected stream waits for its turn")
			st.Close()
			require.Eventually(t, func() bool { return turnWaits() == 0 }, 30*time.Second, 50*time.Millisecond,
				"the wait outlived its client")

			r := e.decideAdmin(id, map[string]any{"decision": "approve"})
			require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
			again := e.srv.RPCStreamHeader(t, ctx, d.sid, d.sk, d.request("file it"), hdr)
			defer again.Close()
			_, term := readTurn(t, again)
			assert.Equal(t, "Filed.", firstText(message(term)))
			require.Eventually(t, func() bool { return turnWaits() == 0 }, 30*time.Second, 50*time.Millisecond)
		})
	}
}

// TestApprovalHeldTurnAsksNoWorkflow: a connected stream whose enqueued
// turn is held on an approval does not query the session's workflow every
// check interval (5 s): the pending approval row says the workflow has it.
func TestApprovalHeldTurnAsksNoWorkflow(t *testing.T) {
	e, pid, w := heldWaitEnv(t, true)
	d := e.openDriver(pid)
	e.fake.Lane("primary").Enqueue(issueCall("acme/prod"), fakeprovider.Text("Filed."))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := d.streamOptedIn(ctx, "file it")
	defer st.Close()
	seen := until(t, st, isMethod("session.approvalRequest"))
	id := seen[len(seen)-1]["params"].(map[string]any)["approval_id"].(string)
	before := w.controls.Load()
	// Two check intervals and a bit: the wait checked twice before.
	require.Never(t, func() bool { return w.controls.Load() != before }, 11*time.Second, 100*time.Millisecond,
		"the held turn's wait queried its workflow")

	r := e.decideAdmin(id, map[string]any{"decision": "approve"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	_, term := readTurn(t, st)
	assert.Equal(t, "Filed.", firstText(message(term)))
}
