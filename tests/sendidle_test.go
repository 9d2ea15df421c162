package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// pathCounter counts how the API hands turns to the session's workflow.
type pathCounter struct {
	api.Engine
	offered, refused, enqueued atomic.Int32
}

func (c *pathCounter) SendIdle(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) (workflows.TurnResult, bool, error) {
	c.offered.Add(1)
	res, refused, err := c.Engine.SendIdle(ctx, ref, in)
	if refused {
		c.refused.Add(1)
	}
	return res, refused, err
}

func (c *pathCounter) Enqueue(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) error {
	c.enqueued.Add(1)
	return c.Engine.Enqueue(ctx, ref, in)
}

// pathsEnv is newEnv with the API's engine wrapped in a pathCounter
// before the server serves.
func pathsEnv(t *testing.T) (*env, *pathCounter) {
	c := &pathCounter{}
	e := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		c.Engine = p.Deps.Engine
		p.Deps.Engine = c
		p.Deps.IdleUpdate = true
		return nil
	})
	return e, c
}

func (c *pathCounter) counts() [3]int32 {
	return [3]int32{c.offered.Load(), c.refused.Load(), c.enqueued.Load()}
}

// TestIdleSessionTurnsAreUpdates: one driver's turns on an idle session,
// a client tool pause and its owner's resume among them, each go as one
// SendIdle Update that runs the turn, and no signal is sent. Its history
// is recorded as send_idle.
func TestIdleSessionTurnsAreUpdates(t *testing.T) {
	e, paths := pathsEnv(t)
	d := e.open("get_time")
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("hello"), fakeprovider.ToolUse("tu_1", "get_time", nil), fakeprovider.Text("noon it is"))
	_, term := d.send("hi")
	assert.Equal(t, "hello", firstText(message(term)))
	d.send("what time?")
	_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "noon"}})
	assert.Equal(t, "noon it is", firstText(message(term)))
	assert.Equal(t, [3]int32{3, 0, 0}, paths.counts(), "offered, refused, enqueued")
	d.closeSession()
	recordAndReplay(t, e, d.sid, "send_idle")
}

// TestBusySessionTurnsQueueBehind: a message stored while another driver's
// turn runs goes to the signal queue without an Update, and runs after it;
// one that the store finds idle while another driver's turn is paused is
// refused by the workflow's SendIdle validator, queues as a signal, and
// runs only after the owner's resume (a signal too, as B's message is
// unfinished; it passes the queue). Its
// history is recorded as send_idle_busy.
func TestBusySessionTurnsQueueBehind(t *testing.T) {
	e, paths := pathsEnv(t)
	a := e.open("get_time")
	b := e.join(a)
	e.fake.Lane("primary").Enqueue(
		fakeprovider.Text("A's answer").UntilReleased(), fakeprovider.Text("B's answer"),
		fakeprovider.ToolUse("tu_1", "get_time", nil), fakeprovider.Text("A resumed"), fakeprovider.Text("B again"),
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A's turn runs (an Update); B's message finds it unfinished.
	sa := a.stream(ctx, "from A")
	<-e.fake.Started()
	sb := b.stream(ctx, "from B")
	require.Eventually(t, func() bool { return paths.enqueued.Load() == 1 }, 30*time.Second, 20*time.Millisecond)
	assert.Nil(t, sb.Next(300*time.Millisecond), "a queued caller receives zero bytes")
	e.fake.Release()
	assert.Equal(t, "A's answer", firstText(message(lastLine(sa))))
	assert.Equal(t, "B's answer", firstText(message(lastLine(sb))))
	assert.Equal(t, [3]int32{1, 0, 1}, paths.counts(), "offered, refused, enqueued")

	// A pauses for its client tool: its result is recorded, so B's next
	// message finds no unfinished one, and the workflow refuses it.
	a.send("what time?")
	sb = b.stream(ctx, "B again")
	require.Eventually(t, func() bool { return paths.refused.Load() == 1 && paths.enqueued.Load() == 2 }, 30*time.Second, 20*time.Millisecond)
	assert.Nil(t, sb.Next(300*time.Millisecond), "B waits behind A's paused turn")
	_, term := a.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "noon"}})
	assert.Equal(t, "A resumed", firstText(message(term)))
	assert.Equal(t, "B again", firstText(message(lastLine(sb))))
	// A's resume found B's message unfinished: it went as a signal too,
	// and passed the queue as the paused turn's owner.
	assert.Equal(t, [3]int32{3, 1, 3}, paths.counts(), "offered, refused, enqueued")

	var seq []string
	for _, ev := range a.allEvents() {
		if ev["event_type"] == "server.message.send" {
			who := "A"
			if ev["client_key_id"] == b.keyID {
				who = "B"
			}
			seq = append(seq, who)
		}
	}
	assert.Equal(t, []string{"A", "B", "A", "A", "B"}, seq)
	a.closeSession()
	recordAndReplay(t, e, a.sid, "send_idle_busy")
}

// lastLine reads a stream to its end and returns its last line.
func lastLine(st *testenv.Stream) map[string]any {
	defer st.Close()
	var last map[string]any
	for m := range st.Lines() {
		last = m
	}
	return last
}

// strandTurn leaves the session in the state a worker killed inside a
// SendIdle Update's speculative workflow task leaves it: the message is
// stored under key and its turn's begin committed (client.message.send
// appended, the begin result stored), and no workflow run recorded the
// Update. It returns the turn id.
func strandTurn(t *testing.T, e *env, d *driver, key, text string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	turnID := "trn_stranded" + strings.Repeat("0", 20) + key
	msg, err := json.Marshal(map[string]any{"role": "user", "content": text})
	require.NoError(t, err)
	put, err := e.srv.Parts.Store.PutTurnInput(ctx, d.sid, turnID, d.keyID, msg, key, store.Caps{})
	require.NoError(t, err)
	require.True(t, put.Idle, "the stranded turn was admitted as idle")
	begin, err := e.srv.Parts.Activities.BeginTurn(ctx, workflows.BeginTurnInput{TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnID, ClientKeyID: d.keyID}})
	require.NoError(t, err)
	require.Empty(t, begin.Outcome, "the turn began")
	return turnID
}

// answers are the texts of the session's server.message.send events, in
// log order.
func answers(d *driver) []string {
	var out []string
	for _, ev := range d.allEvents() {
		if ev["event_type"] == "server.message.send" {
			out = append(out, firstText(ev["payload"].(map[string]any)))
		}
	}
	return out
}

// TestStrandedIdleTurnIsResubmitted: a turn whose begin committed in a
// SendIdle task that was lost (strandTurn) is answered on its resend,
// once: the resend's check finds it begun, unended and held by no run, and
// enqueues it again; the workflow runs it from its stored begin. (It
// answered "session loop failed" before, every resend.)
func TestStrandedIdleTurnIsResubmitted(t *testing.T) {
	e, _ := pathsEnv(t)
	d := e.openFirstAnswered()
	strandTurn(t, e, d, "lost-1", "stranded")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d.requireResendAnswered(ctx, "lost-1", "stranded")
	assert.Equal(t, []string{"echo: first", "echo: stranded"}, answers(d))
	assert.Equal(t, 2, countTypes(d.allEvents())["client.message.send"])
}

// TestStrandedTurnRunsBeforeTheNext: a message stored after a stranded
// turn (strandTurn) names it as ahead of it, so the workflow runs the
// stranded turn first, from its stored begin, then the new one; the
// stranded turn's resend gets its answer. (Before, the new turn ran and
// took the stranded one out of the conversation.) Its history is
// recorded as send_idle_stranded.
func TestStrandedTurnRunsBeforeTheNext(t *testing.T) {
	e, paths := pathsEnv(t)
	d := e.openFirstAnswered()
	strandTurn(t, e, d, "lost-2", "stranded")
	_, term := d.send("next")
	require.Equal(t, "echo: next", firstText(message(term)))
	assert.Equal(t, []string{"echo: first", "echo: stranded", "echo: next"}, answers(d))
	assert.Equal(t, [3]int32{1, 0, 1}, paths.counts(), "offered, refused, enqueued")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d.requireResendAnswered(ctx, "lost-2", "stranded")
	assert.Len(t, answers(d), 3, "answered once")
	// The provider saw the stranded message before the next one.
	reqs := e.fake.Requests()
	assert.Len(t, reqs[len(reqs)-1].Messages(), 5)
	d.closeSession()
	recordAndReplay(t, e, d.sid, "send_idle_stranded")
}

// idleHolder holds every SendIdle Update until the signal of a turn
// stored behind it is in history: the race in which a driver's next
// message, sent once the first one's stream opened, reaches the workflow
// first.
type idleHolder struct {
	api.Engine
	enqueued chan workflows.SendMessageInput
}

func (h *idleHolder) SendIdle(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) (workflows.TurnResult, bool, error) {
	timeout := time.After(10 * time.Second)
	for behind := false; !behind; {
		select {
		case next := <-h.enqueued:
			behind = slices.ContainsFunc(next.Ahead, func(a workflows.AheadTurn) bool { return a.TurnID == in.TurnID })
		case <-timeout:
			behind = true
		}
	}
	return h.Engine.SendIdle(ctx, ref, in)
}

func (h *idleHolder) Enqueue(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) error {
	err := h.Engine.Enqueue(ctx, ref, in)
	select {
	case h.enqueued <- in:
	default:
	}
	return err
}

// TestBackToBackSendsRunInArrivalOrder: a driver sends a message on an
// idle session and, as soon as its stream opens, the next one. The next
// one's signal names the first as ahead of it, so the first runs first
// even when the signal reaches the workflow before the first one's
// SendIdle Update (held on purpose until then: the second ran first
// before). Then the same without holding, many times. Its history is
// recorded as send_idle_ahead.
func TestBackToBackSendsRunInArrivalOrder(t *testing.T) {
	h := &idleHolder{enqueued: make(chan workflows.SendMessageInput, 16)}
	hold := true
	e := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		h.Engine = p.Deps.Engine
		if hold {
			p.Deps.Engine = h
		}
		p.Deps.IdleUpdate = true
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	backToBack := func(d *driver, n int) {
		t.Helper()
		var want []string
		for i := range n {
			a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
			sa := d.stream(ctx, a)
			require.Equal(t, http.StatusOK, sa.Status())
			sb := d.stream(ctx, b)
			assert.Equal(t, "echo: "+a, firstText(message(lastLine(sa))))
			assert.Equal(t, "echo: "+b, firstText(message(lastLine(sb))))
			want = append(want, "echo: "+a, "echo: "+b)
		}
		assert.Equal(t, want, answers(d), "answers in the order the messages were sent")
	}
	d := e.open()
	backToBack(d, 5)
	d.closeSession()
	recordAndReplay(t, e, d.sid, "send_idle_ahead")

	hold = false
	e2 := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		p.Deps.IdleUpdate = true
		return nil
	})
	backToBack(e2.open(), 40)
}

// enqueueHolder holds every Enqueue signal until release closes.
type enqueueHolder struct {
	api.Engine
	release chan struct{}
}

func (h *enqueueHolder) Enqueue(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) error {
	<-h.release
	return h.Engine.Enqueue(ctx, ref, in)
}

// TestAheadTurnEndedInAnEarlierRunIsNotRunAgain: a message stored while a
// turn ran names that turn as ahead of it; when its signal reaches the
// workflow only after the turn ended and the run continued as new (held
// on purpose), the new run knows the turn ended (Carry.Ended) and does not
// run it again from the store. Its second run's history is recorded as
// send_idle_ended_carried.
func TestAheadTurnEndedInAnEarlierRunIsNotRunAgain(t *testing.T) {
	h := &enqueueHolder{release: make(chan struct{})}
	e := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		h.Engine = p.Deps.Engine
		p.Deps.Engine = h
		p.Deps.IdleUpdate = true
		return nil
	})
	e.srv.Parts.Engine.TurnsPerRun = 1
	d := e.open()
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("first answer").UntilReleased())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := d.stream(ctx, "first")
	<-e.fake.Started()
	desc, err := e.srv.Temporal.DescribeWorkflowExecution(ctx, d.sid, "")
	require.NoError(t, err)
	firstRun := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	next := d.stream(ctx, "next") // stored with the first turn ahead; its signal held
	e.fake.Release()
	assert.Equal(t, "first answer", firstText(message(lastLine(first))))
	require.Eventually(t, func() bool {
		desc, err := e.srv.Temporal.DescribeWorkflowExecution(ctx, d.sid, "")
		return err == nil && desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() != firstRun
	}, 30*time.Second, 20*time.Millisecond, "the run continued as new")
	close(h.release)
	assert.Equal(t, "echo: next", firstText(message(lastLine(next))))
	assert.Equal(t, []string{"first answer", "echo: next"}, answers(d))

	// Two turns ran: the second run did not run the first one again.
	v, err := e.srv.Parts.Engine.Control(ctx, d.sid)
	require.NoError(t, err)
	assert.Equal(t, 2, v.Turns, "turns run")
	d.closeSession()
	recordAndReplay(t, e, d.sid, "send_idle_ended_carried")
}
