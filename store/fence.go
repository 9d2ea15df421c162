package store

import (
	"errors"
	"fmt"
)

// ErrTurnSuperseded: a turn's step (a provider attempt, a server-side tool
// call, a compaction, the end of an iteration) found the session's
// conversation moved on from the turn (interrupted, taken out of the
// conversation, rewound, or a later turn began): what it would store
// belongs to no live turn, and nothing of it is stored.
var ErrTurnSuperseded = errors.New("turn superseded: the conversation moved on")

// AttemptFence is what a turn's step continues: the conversation as of
// counter At, whose last message is TailKey. For a provider attempt that is
// its request's conversation (TailKey the turn's own message, or its last
// iteration's tool results). At 0 is the counter TailKey was appended at:
// a step that appends no message before it (a server-side tool call after
// its iteration's assistant message, a compaction before its attempt)
// holds while that message is still the conversation's end, since every
// append or removal moves the counter past it.
type AttemptFence struct {
	SessionID string
	TailKey   string
	At        int64
}

// fenceSQL locks the session row and finds it only while its conversation
// is still exactly the one the attempt continues: no message appended or
// taken out since (the counter), and the last message the turn's own.
// Under READ COMMITTED a row changed by a transaction that committed while
// this one waited for the lock is re-checked, so the fence and every
// change to the conversation are serialised on the session row.
const fenceSQL = `SELECT 1 FROM sessions s JOIN session_messages m ON m.session_id = s.id AND m.seq = s.last_message_seq
	WHERE s.id = $1 AND ($2::bigint = 0 OR s.last_message_seq = $2) AND m.idem_key = $3 AND m.dropped_seq IS NULL
	FOR UPDATE OF s`

// fenceCheckedSQL is fenceSQL failing on the server (checkSuperseded) when
// the conversation moved on, for a batch that ends with COMMIT.
const fenceCheckedSQL = `WITH f AS (` + fenceSQL + `) SELECT bae_check((SELECT count(*) FROM f) = 1, '` + checkSuperseded + `', 'turn of ' || $3 || CASE WHEN $2::bigint = 0 THEN '' ELSE ' at message ' || $2::bigint::text END)`

// Fence makes the transaction store nothing unless the step's turn is
// still the live end of its session's conversation (f): queued ahead of
// the step's writes, it costs no round trip of its own, and on a moved
// conversation the transaction fails with ErrTurnSuperseded. A
// transaction with nothing but the fence checks it (one round trip), for
// a step about to start a side effect.
func (t *Tx) Fence(f AttemptFence) {
	mismatch := fmt.Errorf("turn of %s at message %d: %w", f.TailKey, f.At, ErrTurnSuperseded)
	if f.At == 0 {
		mismatch = fmt.Errorf("turn of %s: %w", f.TailKey, ErrTurnSuperseded)
	}
	t.db.queue(queuedWrite{
		what: "fence turn step", sql: fenceSQL, args: []any{f.SessionID, f.At, f.TailKey}, rows: 1,
		checked:  fenceCheckedSQL,
		mismatch: mismatch,
	})
}

// unendedSQL locks the session row and finds it only while the turn is the
// live, unanswered end of its conversation: the conversation's last
// message is one of the turn's (its key is prefixed "<turn>/"), nothing
// was taken out since (the counter is at that message), and it answers
// nothing (a user message, or an assistant message asking for a tool). A
// turn interrupted (its kept answer ends it), answered, taken out of the
// conversation, rewound or followed by a later turn's message fails it.
const unendedSQL = `SELECT 1 FROM sessions s JOIN session_messages m ON m.session_id = s.id AND m.seq = s.last_message_seq
	WHERE s.id = $1 AND starts_with(m.idem_key, $2 || '/') AND m.dropped_seq IS NULL
	AND (m.role <> 'assistant' OR m.content::jsonb @> '[{"type":"tool_use"}]')
	FOR UPDATE OF s`

// FenceUnended makes the transaction store nothing unless turnID is still
// the live, unanswered end of its session's conversation (unendedSQL), for
// what ends a turn that no message of its own fences (its failure): a run
// of it that a later turn or an interrupt overtook stores nothing, and the
// transaction fails with ErrTurnSuperseded. Queued like Fence.
func (t *Tx) FenceUnended(sessionID, turnID string) {
	t.db.queue(queuedWrite{
		what: "fence turn end", sql: unendedSQL, args: []any{sessionID, turnID}, rows: 1,
		checked:  `WITH f AS (` + unendedSQL + `) SELECT bae_check((SELECT count(*) FROM f) = 1, '` + checkSuperseded + `', 'turn ' || $2 || ' no longer ends the conversation')`,
		mismatch: fmt.Errorf("turn %s no longer ends the conversation: %w", turnID, ErrTurnSuperseded),
	})
}
