package store

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// DBCalls counts what a store sent to PostgreSQL since it was opened: round
// trips (a statement on its own, or a batch of them, which is one) and
// statements. Benchmarks divide them by turns (bench/turns).
type DBCalls struct {
	RoundTrips int64
	Statements int64
}

// DBCalls reads the store's counters.
func (s *Store) DBCalls() DBCalls {
	if s.calls == nil {
		return DBCalls{}
	}
	return DBCalls{RoundTrips: s.calls.roundTrips.Load(), Statements: s.calls.statements.Load()}
}

// callCounter is the pool's pgx tracer: two atomic adds per round trip.
type callCounter struct {
	roundTrips, statements atomic.Int64
}

func (c *callCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.roundTrips.Add(1)
	c.statements.Add(1)
	return ctx
}

func (c *callCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *callCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	return ctx
}

func (c *callCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}

func (c *callCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
