package tests

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// A turn begun by a workflow task that was lost (docs/benchmarks.md,
// "Chaos", finding 2): its begin and provider.request are in PostgreSQL,
// and the history that survived holds nothing of it. A later message
// whose own submission was lost too (its server died between storing it
// and sending its signal) is submitted again by its client's resend or
// by the orphan sweep. That resubmission named nothing ahead of it, so
// the later turn ran first, its begin took the lost turn out of the
// conversation as unfinished, and the lost turn, run after it, found
// itself superseded: no answer, its request without a response.

// strandAttempt stores a message as an idle session's sendMessage does,
// then begins its turn and makes its first provider attempt as a SendIdle
// workflow task would, on a worker killed during the provider call: the
// begin and the provider.request are committed, no response, and the
// workflow never heard of the turn.
func strandAttempt(t *testing.T, e *env, d *driver, key, text string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	turnID := "trn_lostbegin" + strings.Repeat("0", 19) + key
	msg, err := json.Marshal(map[string]any{"role": "user", "content": text})
	require.NoError(t, err)
	put, err := e.srv.Parts.Store.PutTurnInput(ctx, d.sid, turnID, d.keyID, msg, key, store.Caps{})
	require.NoError(t, err)
	require.True(t, put.Idle, "the lost turn was stored on an idle session")

	for len(e.fake.Started()) > 0 {
		<-e.fake.Started() // earlier turns' calls
	}
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("never delivered").UntilReleased())
	callCtx, kill := context.WithCancel(ctx)
	ref := workflows.TurnRef{SessionID: d.sid, TurnID: turnID, ClientKeyID: d.keyID}
	called := make(chan error, 1)
	go func() {
		_, err := otherWorker(e).CallProvider(callCtx, workflows.CallProviderInput{TurnRef: ref, Begin: &workflows.BeginTurnInput{TurnRef: ref}})
		called <- err
	}()
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the lost turn's provider call never started")
	}
	kill() // the worker dies mid-call
	require.Error(t, <-called)
	e.fake.Release()
	require.Equal(t, []string{"client.message.send", "provider.request"}, turnEventTypes(t, e, d.sid, turnID))
	return turnID
}

// storeLostSignal stores a message as sendMessage does, on a server that
// dies before it sends the turn's signal; it names the lost turn ahead.
func storeLostSignal(t *testing.T, e *env, d *driver, key, text, lost string) string {
	t.Helper()
	turnID := "trn_lostsignal" + strings.Repeat("0", 18) + key
	msg, err := json.Marshal(map[string]any{"role": "user", "content": text})
	require.NoError(t, err)
	put, err := e.srv.Parts.Store.PutTurnInput(context.Background(), d.sid, turnID, d.keyID, msg, key, store.Caps{})
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(put.Ahead, func(u store.UnfinishedTurn) bool { return u.TurnID == lost }), "%+v", put.Ahead)
	return turnID
}

// requireAnsweredInOrder checks that each message was answered once, in
// the order stored, and that no turn ended superseded.
func requireAnsweredInOrder(t *testing.T, e *env, d *driver, lost string, want ...string) {
	t.Helper()
	assert.Equal(t, want, answers(d), "each message answered once, in the order stored")
	types := turnEventTypes(t, e, d.sid, lost)
	assert.Equal(t, 1, countOf(types, "server.message.send"), "the lost turn's answer: %v", types)
	assert.Equal(t, countOf(types, "provider.request"), countOf(types, "provider.response"), "every request of the lost turn has its response: %v", types)
	assert.Zero(t, countTypes(d.allEvents())["session.error"], "no turn failed")
}

func countOf(types []string, typ string) int {
	n := 0
	for _, t := range types {
		if t == typ {
			n++
		}
	}
	return n
}

// TestResentTurnRunsAfterALostBegin: the later message comes back as its
// client's resend (same Idempotency-Key). The resubmission names the turns
// stored before it that have not ended, as its lost signal would have, so
// the workflow runs the lost turn first, from what the store holds; each
// message is answered once, in order, and the lost turn's resend gets its
// answer. Seen red without the resubmission's ahead list: the later turn
// ran first and the lost one ended failed at "superseded", unanswered.
// Its history is recorded as lost_begin_resend.
func TestResentTurnRunsAfterALostBegin(t *testing.T) {
	e, _ := pathsEnv(t)
	d := e.openFirstAnswered()
	lost := strandAttempt(t, e, d, "lost-a", "begun then lost")
	storeLostSignal(t, e, d, "lost-b", "stored after it", lost)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d.requireResendAnswered(ctx, "lost-b", "stored after it")
	d.requireResendAnswered(ctx, "lost-a", "begun then lost")
	requireAnsweredInOrder(t, e, d, lost, "echo: first", "echo: begun then lost", "echo: stored after it")
	// The provider saw the lost message before the later one.
	reqs := e.fake.Requests()
	assert.Len(t, reqs[len(reqs)-1].Messages(), 5)
	requireValidNextTurn(t, e, d, "primary")
	d.closeSession()
	recordAndReplay(t, e, d.sid, "lost_begin_resend")
}

// TestOrphanSweptTurnRunsAfterALostBegin: the same, with nobody resending
// the later message: the orphan sweep submits it again, naming what is
// ahead of it. Seen red without the sweep's ahead list, as above.
func TestOrphanSweptTurnRunsAfterALostBegin(t *testing.T) {
	e, _ := pathsEnv(t)
	d := e.openFirstAnswered()
	lost := strandAttempt(t, e, d, "lost-c", "begun then lost")
	later := storeLostSignal(t, e, d, "lost-d", "stored after it", lost)

	require.Eventually(t, func() bool {
		return slices.Contains(turnEventTypes(t, e, d.sid, later), "server.message.send")
	}, time.Minute, 100*time.Millisecond, "the sweep ran the later turn")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d.requireResendAnswered(ctx, "lost-c", "begun then lost")
	requireAnsweredInOrder(t, e, d, lost, "echo: first", "echo: begun then lost", "echo: stored after it")
}

// aheadStripper submits every turn naming nothing ahead of it: a path the
// ahead lists miss (a server from before them, in a rolling upgrade).
type aheadStripper struct{ api.Engine }

func (s aheadStripper) Enqueue(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) error {
	in.Ahead = nil
	return s.Engine.Enqueue(ctx, ref, in)
}

// TestBeginHandsBackALostBegin: the later turn reaches the workflow
// naming nothing ahead of it. Its begin finds the lost turn begun, not
// ended and still in the conversation, stores nothing and hands it back;
// the workflow runs the lost turn first, then the later one. Seen red with
// the begin ignoring HandBack (the lost turn taken out of the
// conversation, then superseded). Its history is recorded as
// lost_begin_handed_back.
func TestBeginHandsBackALostBegin(t *testing.T) {
	e := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		p.Deps.Engine = aheadStripper{p.Deps.Engine}
		p.Deps.IdleUpdate = true
		return nil
	})
	d := e.openFirstAnswered()
	lost := strandAttempt(t, e, d, "lost-e", "begun then lost")

	_, term := d.send("sent after it")
	require.Equal(t, "echo: sent after it", firstText(message(term)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d.requireResendAnswered(ctx, "lost-e", "begun then lost")
	requireAnsweredInOrder(t, e, d, lost, "echo: first", "echo: begun then lost", "echo: sent after it")
	requireValidNextTurn(t, e, d, "primary")
	d.closeSession()
	recordAndReplay(t, e, d.sid, "lost_begin_handed_back")
}
