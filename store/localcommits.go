package store

import (
	"context"
	"sync"
	"time"
)

// localCommits are this process's commits in flight that carry events, by
// session: from just before COMMIT is sent until the transaction settled
// (its events handed to the tail, or the tail forgotten after a failure).
// PostgreSQL's notices of such a commit (a turn's result) can reach this
// process before the committing goroutine settles it; a reader woken by
// one waits for the settle instead of reading the table (see
// Store.FollowEventsThrough).
type localCommits struct {
	mu      sync.Mutex
	flights map[string]*flight
	// waiting, when set (tests), is called as a wait begins.
	waiting func()
}

type flight struct {
	n    int
	done chan struct{} // closed when n drops to 0
}

func newLocalCommits() *localCommits { return &localCommits{flights: map[string]*flight{}} }

// begin marks a commit of the sessions' events as in flight.
func (c *localCommits) begin(sessionIDs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range sessionIDs {
		f := c.flights[id]
		if f == nil {
			f = &flight{done: make(chan struct{})}
			c.flights[id] = f
		}
		f.n++
	}
}

// end marks begin's commit settled.
func (c *localCommits) end(sessionIDs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range sessionIDs {
		if f := c.flights[id]; f != nil {
			if f.n--; f.n == 0 {
				close(f.done)
				delete(c.flights, id)
			}
		}
	}
}

// wait waits up to limit until no commit of the session's events is in
// flight; it reports whether one was (and so may have changed the tail).
func (c *localCommits) wait(ctx context.Context, sessionID string, limit time.Duration) bool {
	c.mu.Lock()
	f := c.flights[sessionID]
	c.mu.Unlock()
	if f == nil {
		return false
	}
	if c.waiting != nil {
		c.waiting()
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-f.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// settleWait bounds how long a reader waits for a local commit to settle:
// the commit's reply is on its way when its notice arrived, so this is
// only reached when the committing goroutine is starved.
const settleWait = time.Second

// FollowEventsThrough is FollowEvents for a reader that knows the log
// reaches through (a turn's last event, from its result): when memory
// stops short of it while this process commits events of the session (the
// result's notice came before the commit settled), it waits for that
// commit and reads memory again, rather than the table.
func (s *Store) FollowEventsThrough(ctx context.Context, sessionID string, after, through int64, limit int) ([]Event, error) {
	evs, err := s.FollowEvents(ctx, sessionID, after, limit)
	if err != nil || len(evs) == limit || lastOf(evs, after) >= through {
		return evs, err
	}
	if !s.local.wait(ctx, sessionID, settleWait) {
		return evs, nil
	}
	more, err := s.FollowEvents(ctx, sessionID, lastOf(evs, after), limit-len(evs))
	if err != nil {
		return nil, err
	}
	return append(evs, more...), nil
}

// lastOf is the sequence of evs' last event, after when there is none.
func lastOf(evs []Event, after int64) int64 {
	if len(evs) == 0 {
		return after
	}
	return evs[len(evs)-1].Seq
}
