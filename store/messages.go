package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Message is one entry of the conversation sent upstream.
type Message struct {
	Seq     int64           `json:"-"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// AppendMessage appends a conversation message unless one with idemKey is
// already stored. One statement (the key check, the counter and the
// insert), sent with the transaction's next round trip; it fails the
// transaction with ErrNotFound when the session does not exist.
func (t *Tx) AppendMessage(sessionID, idemKey, role string, content json.RawMessage) {
	t.db.queue(queuedWrite{what: "append message", sql: appendMessageSQL + `SELECT 1 FROM found UNION ALL SELECT 1 FROM ins`,
		checked: appendMessageSQL + `SELECT bae_check((SELECT count(*) FROM found) + (SELECT count(*) FROM ins) = 1, '` + checkRows + `', 'append message: session ' || $1 || ' not found')`,
		args:    []any{sessionID, idemKey, role, string(content)}, rows: 1, message: []any{sessionID, idemKey, role, string(content)}})
}

// appendMessageSQL is AppendMessage's statement but its last SELECT: found
// and ins hold one row between them unless the session does not exist.
const appendMessageSQL = `WITH found AS (
			SELECT 1 FROM session_messages WHERE session_id = $1 AND idem_key = $2
		), counter AS (
			UPDATE sessions SET last_message_seq = last_message_seq + 1 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM found) RETURNING last_message_seq
		), ins AS (
			INSERT INTO session_messages (session_id, seq, idem_key, role, content)
			SELECT $1::text, last_message_seq, $2::text, $3::text, $4::json FROM counter RETURNING 1
		)
		`

// MessageByIdem returns a stored message by idempotency key.
func (s *Store) MessageByIdem(ctx context.Context, sessionID, idemKey string) (Message, error) {
	var m Message
	var c []byte
	err := s.Pool.QueryRow(ctx, `SELECT seq, role, content FROM session_messages WHERE session_id = $1 AND idem_key = $2`, sessionID, idemKey).Scan(&m.Seq, &m.Role, &c)
	if errors.Is(err, pgx.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	if err != nil {
		return Message{}, fmt.Errorf("get message: %w", err)
	}
	m.Content = c
	return m, nil
}

// History returns the whole conversation in order (without the messages
// taken out of it).
func (s *Store) History(ctx context.Context, sessionID string) ([]Message, error) {
	rows, err := s.Pool.Query(ctx, `SELECT seq, role, content FROM `+conversationRows("$1", "true")+` m WHERE dropped_seq IS NULL ORDER BY seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) {
		var m Message
		var c []byte
		err := r.Scan(&m.Seq, &m.Role, &c)
		m.Content = c
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return list, nil
}

// PendingTurn is the server-side half of a paused turn.
type PendingTurn struct {
	TurnID        string            `json:"turn_id"`
	Owner         string            `json:"owner"`
	ToolUses      []json.RawMessage `json:"tool_uses"`
	ServerResults []json.RawMessage `json:"server_results"`
}

// SetPendingTurn records (or with nil clears) the paused turn.
func (t *Tx) SetPendingTurn(ctx context.Context, sessionID string, p *PendingTurn) error {
	tx := t.db
	var v any
	if p != nil {
		b, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("marshal pending turn: %w", err)
		}
		v = string(b)
	}
	if _, err := tx.Exec(ctx, `UPDATE sessions SET pending_turn = $2 WHERE id = $1`, sessionID, v); err != nil {
		return fmt.Errorf("store pending turn: %w", err)
	}
	return nil
}

// PendingTurn reads the paused turn, nil when none, locking the session row.
func (t *Tx) PendingTurn(ctx context.Context, sessionID string) (*PendingTurn, string, error) {
	tx := t.db
	var raw []byte
	var state string
	if err := tx.QueryRow(ctx, `SELECT pending_turn, state FROM sessions WHERE id = $1 FOR UPDATE`, sessionID).Scan(&raw, &state); err != nil {
		return nil, "", fmt.Errorf("read pending turn: %w", err)
	}
	if len(raw) == 0 {
		return nil, state, nil
	}
	var p PendingTurn
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, state, fmt.Errorf("decode pending turn: %w", err)
	}
	return &p, state, nil
}

// EndSession is EndSession within a caller's transaction.
func (t *Tx) EndSession(ctx context.Context, sessionID, state string) (bool, error) {
	tx := t.db
	tag, err := tx.Exec(ctx, `UPDATE sessions SET state = $2, closed_at = now() WHERE id = $1 AND state = 'open'`, sessionID, state)
	if err != nil {
		return false, fmt.Errorf("end session: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// SandboxState is the session's one running remote sandbox.
type SandboxState struct {
	ID    string `json:"id"`
	Image string `json:"image"`
	// ExecTimeoutSecs is the exec timeout of the policy the container was
	// started with (0 in rows written before it existed: the default).
	ExecTimeoutSecs int `json:"exec_timeout_secs,omitempty"`
	// ClientKeyID is the client key that started it, whose cap of running
	// sandboxes it counts against ("" in rows written before it existed).
	ClientKeyID string `json:"client_key_id,omitempty"`
}

// Sandbox returns the running sandbox, nil when none.
func (s *Store) Sandbox(ctx context.Context, sessionID string) (*SandboxState, error) {
	var raw []byte
	if err := s.Pool.QueryRow(ctx, `SELECT sandbox FROM sessions WHERE id = $1`, sessionID).Scan(&raw); err != nil {
		return nil, fmt.Errorf("read sandbox: %w", err)
	}
	if len(raw) == 0 {
		return nil, nil
	}
	var sb SandboxState
	if err := json.Unmarshal(raw, &sb); err != nil {
		return nil, fmt.Errorf("decode sandbox: %w", err)
	}
	return &sb, nil
}

// ErrSandboxBusy is SetSandbox's answer (with onlyIfEmpty) when the
// session's one sandbox slot is already taken.
var ErrSandboxBusy = errors.New("a remote sandbox is already running for this session")

// SetSandbox records or (nil) clears the running sandbox. With
// onlyIfEmpty it refuses to overwrite an existing one.
func (s *Store) SetSandbox(ctx context.Context, sessionID string, sb *SandboxState, onlyIfEmpty bool) error {
	var v any
	if sb != nil {
		b, _ := json.Marshal(sb)
		v = string(b)
	}
	q := `UPDATE sessions SET sandbox = $2 WHERE id = $1`
	if onlyIfEmpty {
		q += ` AND sandbox IS NULL`
	}
	tag, err := s.Pool.Exec(ctx, q, sessionID, v)
	if err != nil {
		return fmt.Errorf("store sandbox: %w", err)
	}
	if onlyIfEmpty && tag.RowsAffected() == 0 {
		return ErrSandboxBusy
	}
	return nil
}

// RepairConversation takes a failed turn's messages out of the
// conversation (turnID may be empty), then drops whole turns from the end
// until the conversation ends cleanly: empty, or with an assistant message
// that asks for no tool. A turn that died half-way (an outage past every
// budget, a lost workflow) therefore never leaves two user messages in a row
// or a tool_use without its tool_result for the next provider call. Events
// stay in the log; only the provider-facing conversation changes. It returns
// the turns removed.
func (t *Tx) RepairConversation(ctx context.Context, sessionID, turnID string) ([]string, error) {
	tx := t.db
	return repairConversation(ctx, tx, sessionID, turnID, nil)
}

// RepairConversationFrom is Tx.RepairConversation with no failed turn and
// the conversation's last message as Tx.BeginInputs read it (nil: not known),
// so a clean conversation costs no query.
func (t *Tx) RepairConversationFrom(ctx context.Context, sessionID string, tail *TailMessage) ([]string, error) {
	tx := t.db
	return repairConversation(ctx, tx, sessionID, "", tail)
}

func repairConversation(ctx context.Context, tx dbtx, sessionID, turnID string, tail *TailMessage) ([]string, error) {
	var removed []string
	drop := func(turn string) error {
		// The removal takes the next counter value, which no message will
		// have, and marks the messages with it: references to earlier
		// conversations still name them (see convCache).
		tag, err := tx.Exec(ctx, `WITH hit AS (
				SELECT seq FROM session_messages WHERE session_id = $1 AND starts_with(idem_key, $2) AND dropped_seq IS NULL FOR UPDATE
			), d AS (
				UPDATE sessions SET last_message_seq = last_message_seq + 1 WHERE id = $1 AND EXISTS (SELECT 1 FROM hit) RETURNING last_message_seq
			)
			UPDATE session_messages m SET dropped_seq = d.last_message_seq FROM d WHERE m.session_id = $1 AND m.seq IN (SELECT seq FROM hit)`,
			sessionID, turn+"/")
		if err != nil {
			return fmt.Errorf("remove turn %s from conversation: %w", turn, err)
		}
		if tag.RowsAffected() > 0 {
			removed = append(removed, turn)
		}
		return nil
	}
	if turnID != "" {
		if err := drop(turnID); err != nil {
			return nil, err
		}
	}
	for {
		var key, role string
		var content []byte
		if tail != nil {
			key, role, content, tail = tail.IdemKey, tail.Role, tail.Content, nil
		} else {
			err := tx.QueryRow(ctx, `SELECT idem_key, role, content FROM `+conversationRows("$1", "true")+` m WHERE dropped_seq IS NULL ORDER BY seq DESC LIMIT 1`, sessionID).Scan(&key, &role, &content)
			if errors.Is(err, pgx.ErrNoRows) {
				return removed, nil
			}
			if err != nil {
				return nil, fmt.Errorf("read conversation tail: %w", err)
			}
		}
		if role == "assistant" && !asksForTool(content) {
			return removed, nil
		}
		turn, _, _ := strings.Cut(key, "/")
		if err := drop(turn); err != nil {
			return nil, err
		}
		if len(removed) == 0 || removed[len(removed)-1] != turn {
			// Keys without a turn prefix are not ours to drop.
			return removed, fmt.Errorf("conversation tail %q does not belong to a turn", key)
		}
	}
}

// asksForTool reports whether message content holds a tool_use block.
func asksForTool(content json.RawMessage) bool {
	var blocks []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(content, &blocks) != nil {
		return false
	}
	for _, b := range blocks {
		if b.Type == "tool_use" {
			return true
		}
	}
	return false
}
