package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
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
