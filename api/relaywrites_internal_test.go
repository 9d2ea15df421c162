package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// relayFixture is a sendMessage relay on a stored session, writing to a
// ResponseWriter that records what each flush sent.
type relayFixture struct {
	st    *store.Store
	sess  store.Session
	w     *sentWriter
	call  *rpcCall
	relay *turnRelay
	c     *clientAPI
}

const relayTurnID = "trn_relay"

func newRelayFixture(t *testing.T) *relayFixture {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testdb.New(t), store.Options{KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "p", PrimaryProvider: "x"})
	require.NoError(t, err)
	k, _, err := st.NewClientKey(ctx, "k", p.ID)
	require.NoError(t, err)
	sess, _, err := st.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: k.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	// Followed from here, so this process's appends come from memory.
	_, err = st.FollowEvents(ctx, sess.ID, 0, relayPage)
	require.NoError(t, err)

	w := &sentWriter{header: http.Header{}}
	call := &rpcCall{id: json.RawMessage(`1`), sess: sess, clientID: k.ID, out: &ndjson{w: w, opened: true},
		r: httptest.NewRequest(http.MethodPost, "/", nil), log: slog.New(slog.DiscardHandler)}
	c := &clientAPI{Deps: &Deps{Store: st, Log: slog.New(slog.DiscardHandler)}}
	relay, err := c.newRelay(ctx, call, relayTurnID, false)
	require.NoError(t, err)
	return &relayFixture{st: st, sess: sess, w: w, call: call, relay: relay, c: c}
}

// append stores events of the turn as the workflow does (not the
// caller's own message, which is not echoed), returning the last one's
// sequence.
func (f *relayFixture) append(t *testing.T, steps ...string) int64 {
	t.Helper()
	var evs []store.NewEvent
	for _, s := range steps {
		evs = append(evs, store.NewEvent{IdemKey: relayTurnID + "/" + s, TurnID: relayTurnID, ClientKeyID: f.call.clientID,
			Payload: events.ServerMessage{Content: json.RawMessage(`"` + s + `"`)}})
	}
	var last int64
	require.NoError(t, f.st.Tx(context.Background(), func(tx *store.Tx) error {
		out, err := tx.AppendEvents(context.Background(), f.sess.ID, evs...)
		if err == nil {
			last = out[len(out)-1].Seq
		}
		return err
	}))
	return last
}

// lines is each flush's number of lines.
func (w *sentWriter) lines() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, f := range w.flushes {
		out = append(out, bytes.Count(f, []byte("\n")))
	}
	return out
}

// TestRelayPageIsOneWrite: the events one wake-up finds go to the client
// in one write, not one per event.
func TestRelayPageIsOneWrite(t *testing.T) {
	f := newRelayFixture(t)
	f.append(t, "a", "b", "c")
	require.NoError(t, f.relay.pump(context.Background()))
	assert.Equal(t, []int{3}, f.w.lines(), "three events, one flush")
}

// TestTurnsLastEventsGoWithItsAnswer: the events a turn's result finds
// not yet relayed (its answer, appended with the result) go out with the
// terminal response, in one write.
func TestTurnsLastEventsGoWithItsAnswer(t *testing.T) {
	f := newRelayFixture(t)
	f.append(t, "request")
	require.NoError(t, f.relay.pump(context.Background()))
	last := f.append(t, "response", "answer")
	f.c.finishTurn(f.call, f.relay, workflows.TurnResult{Outcome: workflows.OutcomeCompleted, LastSeq: last}, nil)

	require.Equal(t, []int{1, 3}, f.w.lines(), "the request on its own; the response, the answer and the terminal response in one flush")
	f.w.mu.Lock()
	final := bytes.Split(bytes.TrimSpace(f.w.flushes[1]), []byte("\n"))
	f.w.mu.Unlock()
	var terminal struct {
		Result struct {
			Events  []json.RawMessage `json:"events"`
			Message json.RawMessage   `json:"message"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(final[2], &terminal))
	assert.Len(t, terminal.Result.Events, 3)
	assert.JSONEq(t, `{"role":"assistant","content":"answer"}`, string(terminal.Result.Message))
}

// TestRelayAnswersFromTheAnnouncedResult: the terminal response is written
// as soon as the turn's result is announced, not once the submission
// (here held back) returns it; the request then waits for the submission.
func TestRelayAnswersFromTheAnnouncedResult(t *testing.T) {
	f := newRelayFixture(t)
	f.c.Hub = live.New(nil, slog.New(slog.DiscardHandler))
	f.c.streams = newStreamWatch(f.c)
	f.w.flushed = make(chan struct{}, 1)
	ticket, quota := f.c.streams.join(f.call, relayTurnID)
	require.Nil(t, quota)
	defer ticket.leave()
	last := f.append(t, "request", "response", "answer")
	res := workflows.TurnResult{Outcome: workflows.OutcomeCompleted, LastSeq: last}
	b, err := json.Marshal(res)
	require.NoError(t, err)

	release, submitted := make(chan struct{}), make(chan struct{})
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		f.c.relayTurn(f.call, ticket, relayTurnID, false, func(context.Context, <-chan struct{}) (workflows.TurnResult, error) {
			close(submitted)
			<-release
			return res, nil
		})
	}()
	<-submitted
	f.c.Hub.TurnDone(relayTurnID, b)

	answered := func() bool {
		f.w.mu.Lock()
		defer f.w.mu.Unlock()
		for _, fl := range f.w.flushes {
			if bytes.Contains(fl, []byte(`"result":{"events":[`)) {
				return true
			}
		}
		return false
	}
	// A bound on liveness only: without the announcement's path the
	// answer waits for release, which comes after.
	bound := time.After(30 * time.Second)
	for !answered() {
		select {
		case <-f.w.flushed:
		case <-bound:
			t.Fatal("no terminal response while the submission was held")
		}
	}
	select {
	case <-relayed:
		t.Fatal("the request ended before its submission returned")
	default:
	}
	close(release)
	<-relayed
}

// TestRevokedRelayIsNotAnsweredFromTheAnnouncedResult: a relay whose key
// was revoked while its turn ran ends with the revocation error, also
// when the turn's announced result is at hand as it learns of the
// revocation: the answer goes only to a stream still authorized. The
// relay is held in a write while the key is revoked, the session's
// checker sees it and the result is announced, so that both wait for it
// together; each round is one draw of the relay's choice.
func TestRevokedRelayIsNotAnsweredFromTheAnnouncedResult(t *testing.T) {
	f := newRelayFixture(t)
	ctx := context.Background()
	f.c.RecheckInterval = 5 * time.Millisecond
	f.c.Hub = live.New(nil, slog.New(slog.DiscardHandler))
	f.c.streams = newStreamWatch(f.c)
	for round := range 16 {
		k, _, err := f.st.NewClientKey(ctx, fmt.Sprintf("k%d", round), f.sess.ProfileID)
		require.NoError(t, err)
		sess, _, err := f.st.CreateSession(ctx, f.sess.ProfileID, store.ClientDecl{ClientKeyID: k.ID}, events.Declarations{}, store.Caps{})
		require.NoError(t, err)
		var keyID string
		require.NoError(t, f.st.Pool.QueryRow(ctx, `SELECT id FROM keys WHERE role = 'session' AND session_id = $1`, sess.ID).Scan(&keyID))
		_, err = f.st.FollowEvents(ctx, sess.ID, 0, relayPage)
		require.NoError(t, err)
		w := &sentWriter{header: http.Header{}, block: make(chan struct{}), entered: make(chan struct{}, 1), flushed: make(chan struct{}, 1)}
		call := &rpcCall{id: json.RawMessage(`1`), sess: sess, clientID: k.ID, keyID: keyID, out: &ndjson{w: w, opened: true},
			r: httptest.NewRequest(http.MethodPost, "/", nil), log: slog.New(slog.DiscardHandler)}
		ticket, quota := f.c.streams.join(call, relayTurnID)
		require.Nil(t, quota)
		// Another stream of the key, to see the shared checker's verdict
		// without taking it from the relay.
		watcher, quota := f.c.streams.join(call, "")
		require.Nil(t, quota)

		release, submitted, relayed := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(relayed)
			f.c.relayTurn(call, ticket, relayTurnID, false, func(context.Context, <-chan struct{}) (workflows.TurnResult, error) {
				close(submitted)
				<-release
				return workflows.TurnResult{}, context.Canceled
			})
		}()
		<-submitted
		var last int64
		require.NoError(t, f.st.Tx(ctx, func(tx *store.Tx) error {
			out, err := tx.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: relayTurnID + "/answer", TurnID: relayTurnID, ClientKeyID: k.ID,
				Payload: events.ServerMessage{Content: json.RawMessage(`"the answer"`)}})
			if err == nil {
				last = out[len(out)-1].Seq
			}
			return err
		}))
		f.c.Hub.Wake(sess.ID)
		bound := time.After(30 * time.Second)
		select {
		case <-w.entered: // relaying the answer's event, held
		case <-relayed:
			t.Fatalf("round %d: the relay ended before its turn's first event: %q", round, w.pending.String())
		case <-bound:
			t.Fatal("the relay never relayed its turn's first event")
		}

		_, err = f.st.RevokeClientKey(ctx, k.ID)
		require.NoError(t, err)
		for watcher.verdict() == nil {
			select {
			case <-watcher.checked():
			case <-bound:
				t.Fatal("the checker never saw the revocation")
			}
		}
		b, err := json.Marshal(workflows.TurnResult{Outcome: workflows.OutcomeCompleted, LastSeq: last})
		require.NoError(t, err)
		f.c.Hub.TurnDone(relayTurnID, b)
		close(w.block)

		// The stream's last line: the answer waits for the submission
		// (held), the revocation does not.
		terminal := func() []byte {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, fl := range w.flushes {
				for _, line := range bytes.Split(bytes.TrimSpace(fl), []byte("\n")) {
					var m map[string]json.RawMessage
					if json.Unmarshal(line, &m) == nil && m["id"] != nil {
						return line
					}
				}
			}
			return nil
		}
		for terminal() == nil {
			select {
			case <-w.flushed:
			case <-bound:
				t.Fatal("no terminal line")
			}
		}
		close(release)
		<-relayed
		watcher.leave()
		ticket.leave()
		require.JSONEq(t, `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"unauthorized: the session key was revoked"}}`, string(terminal()),
			"round %d: a revoked stream got its turn's answer", round)
	}
}
