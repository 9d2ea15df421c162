package live

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testdb"
)

func legacyCount(d *Deltas) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.legacy
}

// TestDeltasReachReplicasThatDoNotAnnounce: during a rolling upgrade a
// replica of a version before interest announcements (WithoutInterest
// behaves as one) holds streams it never announces; a replica that
// announces finds its listener, sends it every delta from the first turn
// on, and goes back to sending only what is announced once it is gone.
// A listener that announces is not counted.
func TestDeltasReachReplicasThatDoNotAnnounce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.New(t)
	newPool := func() *pgxpool.Pool {
		p, err := pgxpool.New(ctx, db)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	log := slog.New(slog.DiscardHandler)

	oldCtx, stopOld := context.WithCancel(ctx)
	defer stopOld()
	old := New(newPool(), log)
	old.Deltas().WithoutInterest()
	oldDone := make(chan struct{})
	go func() { defer close(oldDone); old.Run(oldCtx) }()
	<-old.Ready()
	sub := old.Deltas().Subscribe("ses_x")
	defer sub.Close()

	// Another replica that announces: its listener does not count.
	peer := New(newPool(), log)
	go peer.Run(ctx)
	<-peer.Ready()

	a := New(newPool(), log)
	go a.Run(ctx)
	<-a.Ready()
	require.Equal(t, 1, legacyCount(a.Deltas()), "found before ready: the listener of the replica that does not announce")

	a.Deltas().Publish(Delta{SessionID: "ses_x", TurnID: "trn_x", Seq: RunSpan + 1, Type: "text_delta", Text: "hello"})
	select {
	case <-sub.Ready():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the replica that does not announce got no delta")
	}
	got, lost := sub.Take()
	assert.False(t, lost)
	require.Len(t, got, 1)
	assert.Equal(t, "hello", got[0].Text)

	// It stops: deltas go only where announced again.
	stopOld()
	<-oldDone
	require.Eventually(t, func() bool {
		return a.Deltas().checkLegacy(ctx) == nil && legacyCount(a.Deltas()) == 0
	}, 20*time.Second, 50*time.Millisecond, "its listener is gone")
	d := a.Deltas()
	d.outMu.Lock()
	before := d.queued
	d.outMu.Unlock()
	d.Publish(Delta{SessionID: "ses_x", TurnID: "trn_x", Seq: RunSpan + 2, Type: "text_delta", Text: "x"})
	d.outMu.Lock()
	assert.Equal(t, before, d.queued, "nobody announced ses_x")
	d.outMu.Unlock()
}

// TestFirstLegacyListenerGetsTheKeptDeltas: deltas published before a
// replica that does not announce was found are sent when it is, once
// each; those that already went out are not sent again (such a replica
// keeps duplicates).
func TestFirstLegacyListenerGetsTheKeptDeltas(t *testing.T) {
	a, b := newDeltas(nil), newDeltas(nil)
	pub := func(sid string, i int64) {
		a.Publish(Delta{SessionID: sid, TurnID: "trn_" + sid, Seq: RunSpan + i, Type: "text_delta", Text: "x"})
	}
	a.received(b.origin + "\n+ses_seen")
	pub("ses_seen", 1) // notified: B announced it
	pub("ses_x", 1)
	pub("ses_x", 2)
	_, payloads := takeQueued(a)
	require.Len(t, payloads, 1)

	a.setLegacy(1)
	_, payloads = takeQueued(a)
	require.Len(t, payloads, 1)
	c := newDeltas(nil)
	c.WithoutInterest()
	sub := c.Subscribe("ses_x")
	other := c.Subscribe("ses_seen")
	c.received(payloads[0])
	got, _ := sub.Take()
	assert.Len(t, got, 2, "the kept deltas that never went out")
	seen, _ := other.Take()
	assert.Empty(t, seen, "not what went out already")

	pub("ses_x", 3)
	_, payloads = takeQueued(a)
	assert.Len(t, payloads, 1, "every delta from now on")
	a.setLegacy(1)
	_, payloads = takeQueued(a)
	assert.Empty(t, payloads, "nothing again while it stays")
}
