package store

import (
	"context"
)

// Tx is a transaction begun by Store.Tx. Its methods are the store's
// operations that take row locks or must commit with others; Store's own
// methods each run on a pool connection (in a transaction of their own
// where they write more than one row). The lookups both need are one
// implementation over a connection or a transaction (reads).
type Tx struct {
	reads
	db *trackedTx
	s  *Store
	// budgetKey asks the attempt read to read budgets too (budgets holds
	// them after; see ReadBudgetsWithAttempt).
	budgetKey *string
	budgets   []BudgetState
	// results are the turn results stored in it (RecordTurnResult).
	results []recordedResult
}

// reads are the lookups that run alike on a pool connection (Store) or
// inside a transaction (Tx), so a transaction never waits on a second pool
// connection for them.
type reads struct{ q dbtx }

// GetSession returns a session by id (ErrNotFound if missing).
func (r reads) GetSession(ctx context.Context, id string) (Session, error) {
	return getSession(ctx, r.q, id)
}

// GetProfile returns a live profile by id (ErrNotFound if missing or
// deleted).
func (r reads) GetProfile(ctx context.Context, id string) (Profile, error) {
	return getProfile(ctx, r.q, id)
}

// Tx runs fn in a transaction. Events appended in it with Tx.AppendEvents
// reach this process's followers without a query once it committed.
func (s *Store) Tx(ctx context.Context, fn func(tx *Tx) error) error {
	var tx *Tx
	err := s.tx(ctx, func(t *trackedTx) error {
		tx = &Tx{reads: reads{q: t}, db: t, s: s}
		return fn(tx)
	})
	if err == nil && tx != nil {
		s.announceResults(tx.results)
	}
	return err
}

// tx runs fn in a tracked transaction (see trackedTx).
func (s *Store) tx(ctx context.Context, fn func(t *trackedTx) error) error {
	t := &trackedTx{origin: s.origin, local: s.local}
	// After settle; a panic too ends the commit's flight.
	defer t.landed()
	err := runTx(ctx, s.Pool, t, fn)
	s.settle(t, err)
	return err
}
