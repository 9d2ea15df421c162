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

// CountCalls returns a context under which what any store sends
// PostgreSQL is also counted apart, and the function that reads that
// count: the round trips of one request, whatever else runs beside it.
func CountCalls(ctx context.Context) (context.Context, func() DBCalls) {
	c := &callCounter{}
	return context.WithValue(ctx, countedKey{}, c), func() DBCalls {
		return DBCalls{RoundTrips: c.roundTrips.Load(), Statements: c.statements.Load()}
	}
}

type countedKey struct{}

// callCounter is the pool's pgx tracer: two atomic adds per round trip
// (two more under CountCalls).
type callCounter struct {
	roundTrips, statements atomic.Int64
}

func (c *callCounter) add(ctx context.Context, roundTrips, statements int64) {
	c.roundTrips.Add(roundTrips)
	c.statements.Add(statements)
	if apart, ok := ctx.Value(countedKey{}).(*callCounter); ok {
		apart.roundTrips.Add(roundTrips)
		apart.statements.Add(statements)
	}
}

func (c *callCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.add(ctx, 1, 1)
	return ctx
}

func (c *callCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *callCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.add(ctx, 1, 0)
	return ctx
}

func (c *callCounter) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchQueryData) {
	c.add(ctx, 0, 1)
}

func (c *callCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
