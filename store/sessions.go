package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/ids"
)

// Session states.
const (
	StateOpen   = "open"
	StateClosed = "closed"
	StateError  = "error"
)

// Session is a stored session.
type Session struct {
	Seq           int64
	ID            string
	ProfileID     string
	ClientKeyID   string
	State         string
	ClientVersion *string
	MCPTools      json.RawMessage
	CreatedAt     time.Time
	ClosedAt      *time.Time
	// Span is the bae.session span's ref; "" when the session was opened
	// untraced, or its span was already emitted.
	Span string
}

// MarshalJSON renders the admin list shape.
func (s Session) MarshalJSON() ([]byte, error) {
	var closed any
	if s.ClosedAt != nil {
		closed = FormatTime(*s.ClosedAt)
	}
	return json.Marshal(struct {
		ID            string  `json:"id"`
		ProfileID     string  `json:"profile_id"`
		State         string  `json:"state"`
		ClientVersion *string `json:"client_version"`
		CreatedAt     string  `json:"created_at"`
		ClosedAt      any     `json:"closed_at"`
	}{s.ID, s.ProfileID, s.State, s.ClientVersion, FormatTime(s.CreatedAt), closed})
}

const sessionCols = `seq, id, profile_id, client_key_id, state, client_version, mcp_tools, created_at, closed_at, coalesce(span, '')`

func scanSession(row pgx.Row) (Session, error) {
	var s Session
	var mcp []byte
	err := row.Scan(&s.Seq, &s.ID, &s.ProfileID, &s.ClientKeyID, &s.State, &s.ClientVersion, &mcp, &s.CreatedAt, &s.ClosedAt, &s.Span)
	s.MCPTools = mcp
	return s, err
}

// ClientDecl is what one client key declared when it opened or joined.
type ClientDecl struct {
	ClientKeyID   string
	ClientVersion *string
	Tools         json.RawMessage
	SandboxTools  json.RawMessage
	SubagentTools json.RawMessage
	Registered    bool
}

func rawOrEmptyArray(r json.RawMessage) string {
	if len(r) == 0 || string(r) == "null" {
		return "[]"
	}
	return string(r)
}

// CreateSession creates an open session with its creator's declarations,
// mints the creator's session key and appends session.open, atomically.
// It returns the session and the session key plaintext. It fails with
// ErrClientKeyRevoked when the creator's client key is revoked by the time
// the session would be stored, and with *QuotaError when the key or the
// profile holds its caps of open sessions.
func (s *Store) CreateSession(ctx context.Context, profileID string, decl ClientDecl, openPayload events.Declarations, caps Caps) (Session, string, error) {
	secret := ids.NewSecret(ids.SessionKeyPrefix)
	hash, err := hashSessionKey(secret)
	if err != nil {
		return Session{}, "", err
	}
	var sess Session
	var key Key
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := lockClientKey(ctx, tx, decl.ClientKeyID); err != nil {
			return err
		}
		if err := checkSessionCaps(ctx, tx, caps, decl.ClientKeyID, profileID, "", true); err != nil {
			return err
		}
		var err error
		sess, err = insertSession(ctx, tx, profileID, decl.ClientKeyID, StateOpen, decl.ClientVersion)
		if err != nil {
			return err
		}
		if err := upsertClient(ctx, tx, sess.ID, decl); err != nil {
			return err
		}
		if key, err = insertKeyHash(ctx, tx, RoleSession, sess.ID, hash, ids.DisplayPrefix(secret, ids.SessionKeyPrefix), profileID, sess.ID, decl.ClientKeyID); err != nil {
			return err
		}
		_, err = appendEvents(ctx, tx, sess.ID, []NewEvent{{ClientKeyID: decl.ClientKeyID, Payload: openPayload}})
		return err
	})
	if err != nil {
		return Session{}, "", err
	}
	s.remember(secret, key)
	return sess, secret, nil
}

// SetSessionSpan records the session's bae.session span ref.
func (s *Store) SetSessionSpan(ctx context.Context, sessionID, ref string) error {
	if _, err := s.Pool.Exec(ctx, `UPDATE sessions SET span = $2 WHERE id = $1`, sessionID, ref); err != nil {
		return fmt.Errorf("store session span: %w", err)
	}
	return nil
}

// SessionSpan is what emitting an ended session's bae.session span needs.
type SessionSpan struct {
	Ref         string
	ProfileID   string
	ClientKeyID string
	State       string
	CreatedAt   time.Time
	// ForkedFrom is the source of a fork ("" for a session that is not
	// one), ForkedEventSeq the last event it inherited.
	ForkedFrom     string
	ForkedEventSeq int64
}

// TakeSessionSpan claims an ended session's span ref for emitting, so that
// only one replica (and one cleanup attempt) emits it. ok is false when
// there is none to take.
func (s *Store) TakeSessionSpan(ctx context.Context, sessionID string) (SessionSpan, bool, error) {
	var sp SessionSpan
	err := s.Pool.QueryRow(ctx, `UPDATE sessions s SET span = NULL
		FROM (SELECT id, span FROM sessions WHERE id = $1 AND span IS NOT NULL AND state <> 'open' FOR UPDATE) old
		WHERE s.id = old.id
		RETURNING old.span, s.profile_id, s.client_key_id, s.state, s.created_at, coalesce(s.forked_from, ''), coalesce(s.forked_event_seq, 0)`, sessionID).
		Scan(&sp.Ref, &sp.ProfileID, &sp.ClientKeyID, &sp.State, &sp.CreatedAt, &sp.ForkedFrom, &sp.ForkedEventSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return SessionSpan{}, false, nil
	}
	if err != nil {
		return SessionSpan{}, false, fmt.Errorf("take session span: %w", err)
	}
	return sp, true, nil
}

// CreateAuditErrorSession records a refused open/join as a separate session
// row in state error carrying one session.error event.
func (s *Store) CreateAuditErrorSession(ctx context.Context, profileID, clientKeyID string, clientVersion *string, payload events.SessionErrorPayload) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		sess, err := insertSession(ctx, tx, profileID, clientKeyID, StateError, clientVersion)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE sessions SET closed_at = now() WHERE id = $1`, sess.ID); err != nil {
			return fmt.Errorf("stamp audit session: %w", err)
		}
		_, err = appendEnding(ctx, tx, sess.ID, []NewEvent{{ClientKeyID: clientKeyID, Payload: payload}})
		return err
	})
}

func insertSession(ctx context.Context, tx dbtx, profileID, clientKeyID, state string, clientVersion *string) (Session, error) {
	sess, err := scanSession(tx.QueryRow(ctx, `INSERT INTO sessions (id, profile_id, client_key_id, state, client_version)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+sessionCols, ids.New(ids.SessionPrefix), profileID, clientKeyID, state, clientVersion))
	if err != nil {
		return Session{}, fmt.Errorf("insert session: %w", err)
	}
	return sess, nil
}

func upsertClient(ctx context.Context, tx dbtx, sessionID string, d ClientDecl) error {
	_, err := tx.Exec(ctx, `INSERT INTO session_clients (session_id, client_key_id, client_version, tools, sandbox_tools, subagent_tools)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (session_id, client_key_id) DO UPDATE SET client_version = EXCLUDED.client_version,
			tools = EXCLUDED.tools, sandbox_tools = EXCLUDED.sandbox_tools, subagent_tools = EXCLUDED.subagent_tools`,
		sessionID, d.ClientKeyID, d.ClientVersion, rawOrEmptyArray(d.Tools), rawOrEmptyArray(d.SandboxTools), rawOrEmptyArray(d.SubagentTools))
	if err != nil {
		return fmt.Errorf("store client declarations: %w", err)
	}
	return nil
}

// JoinSession attaches another client key to an open session: stores its own
// declarations, mints its session key and appends session.join. It fails with
// *NotOpenError if the session left the open state meanwhile, and like
// CreateSession with ErrClientKeyRevoked or *QuotaError (a join counts
// against its key's cap of open sessions, not the profile's).
func (s *Store) JoinSession(ctx context.Context, sessionID, profileID string, decl ClientDecl, joinPayload events.Declarations, caps Caps) (string, error) {
	secret := ids.NewSecret(ids.SessionKeyPrefix)
	hash, err := hashSessionKey(secret)
	if err != nil {
		return "", err
	}
	var key Key
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := lockClientKey(ctx, tx, decl.ClientKeyID); err != nil {
			return err
		}
		if err := checkSessionCaps(ctx, tx, caps, decl.ClientKeyID, profileID, sessionID, false); err != nil {
			return err
		}
		var state string
		if err := tx.QueryRow(ctx, `SELECT state FROM sessions WHERE id = $1 FOR UPDATE`, sessionID).Scan(&state); err != nil {
			return fmt.Errorf("lock session: %w", err)
		}
		if state != StateOpen {
			return &NotOpenError{State: state}
		}
		if err := upsertClient(ctx, tx, sessionID, decl); err != nil {
			return err
		}
		var err error
		if key, err = insertKeyHash(ctx, tx, RoleSession, sessionID, hash, ids.DisplayPrefix(secret, ids.SessionKeyPrefix), profileID, sessionID, decl.ClientKeyID); err != nil {
			return err
		}
		joinPayload.Join = true
		_, err = appendEvents(ctx, tx, sessionID, []NewEvent{{ClientKeyID: decl.ClientKeyID, Payload: joinPayload}})
		return err
	})
	if err != nil {
		return "", err
	}
	s.remember(secret, key)
	return secret, nil
}

// NotOpenError reports a session that is not in the open state.
type NotOpenError struct{ State string }

func (e *NotOpenError) Error() string { return "session is " + e.State + ", not open" }

func getSession(ctx context.Context, q dbtx, id string) (Session, error) {
	sess, err := scanSession(q.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("get session: %w", err)
	}
	return sess, nil
}

// ListSessions pages sessions, optionally filtered by state.
func (s *Store) ListSessions(ctx context.Context, state string, after int64, limit int) (Page[Session], error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+sessionCols+` FROM sessions WHERE ($1 = '' OR state = $1) AND seq > $2 ORDER BY seq LIMIT $3`, state, after, limit+1)
	if err != nil {
		return Page[Session]{}, fmt.Errorf("list sessions: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Session, error) { return scanSession(r) })
	if err != nil {
		return Page[Session]{}, fmt.Errorf("list sessions: %w", err)
	}
	return pageOf(list, limit, func(s Session) int64 { return s.Seq }), nil
}

// EndSession moves an open session to state (closed or error) and appends
// the given events in the same transaction. It reports false, appending
// nothing, when the session was not open.
func (s *Store) EndSession(ctx context.Context, sessionID, state string, evs ...NewEvent) (bool, []Event, error) {
	var ended bool
	var out []Event
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE sessions SET state = $2, closed_at = now() WHERE id = $1 AND state = 'open'`, sessionID, state)
		if err != nil {
			return fmt.Errorf("end session: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		ended = true
		if len(evs) > 0 {
			out, err = appendEnding(ctx, tx, sessionID, evs)
		}
		return err
	})
	return ended, out, err
}

// AuthenticateSessionKey resolves a session key bound to sessionID.
func (s *Store) AuthenticateSessionKey(ctx context.Context, secret, sessionID string) (Key, error) {
	a, err := s.AuthenticateSession(ctx, secret, sessionID)
	if err != nil {
		return Key{}, err
	}
	return a.Key, nil
}

// Client returns one client's declarations on a session.
func (s *Store) Client(ctx context.Context, sessionID, clientKeyID string) (ClientDecl, error) {
	var d ClientDecl
	var tools, sb, sub []byte
	var reg *time.Time
	err := s.Pool.QueryRow(ctx, `SELECT client_key_id, client_version, tools, sandbox_tools, subagent_tools, registered_at
		FROM session_clients WHERE session_id = $1 AND client_key_id = $2`, sessionID, clientKeyID).
		Scan(&d.ClientKeyID, &d.ClientVersion, &tools, &sb, &sub, &reg)
	if errors.Is(err, pgx.ErrNoRows) {
		return ClientDecl{}, ErrNotFound
	}
	if err != nil {
		return ClientDecl{}, fmt.Errorf("get client declarations: %w", err)
	}
	d.Tools, d.SandboxTools, d.SubagentTools, d.Registered = tools, sb, sub, reg != nil
	return d, nil
}

// RegisterDriver marks clientKeyID a driver of the session. The first
// registration appends the given events (session.driver.register and, when
// applicable, session.sandbox.available) in the same transaction; a repeat
// registration appends nothing. It fails with *NotOpenError on a terminal
// session.
func (s *Store) RegisterDriver(ctx context.Context, sessionID, clientKeyID string, evs func() []NewEvent) (bool, error) {
	var first bool
	// Build the events before taking a connection for the transaction: the
	// builder may query the store, and a transaction must never wait on a
	// second pool connection (a full pool would deadlock).
	events := evs()
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var state string
		if err := tx.QueryRow(ctx, `SELECT state FROM sessions WHERE id = $1`, sessionID).Scan(&state); err != nil {
			return fmt.Errorf("read session state: %w", err)
		}
		if state != StateOpen {
			return &NotOpenError{State: state}
		}
		tag, err := tx.Exec(ctx, `UPDATE session_clients SET registered_at = now() WHERE session_id = $1 AND client_key_id = $2 AND registered_at IS NULL`, sessionID, clientKeyID)
		if err != nil {
			return fmt.Errorf("register driver: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		first = true
		_, err = appendEvents(ctx, tx, sessionID, events)
		return err
	})
	return first, err
}

// Drivers lists the registered driver client-key ids, sorted.
func (s *Store) Drivers(ctx context.Context, sessionID string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT client_key_id FROM session_clients WHERE session_id = $1 AND registered_at IS NOT NULL ORDER BY client_key_id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list drivers: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list drivers: %w", err)
	}
	if list == nil {
		list = []string{}
	}
	return list, nil
}

// SetClientTools replaces one client's client-side tool declarations.
func (s *Store) SetClientTools(ctx context.Context, sessionID, clientKeyID string, tools json.RawMessage) error {
	_, err := s.Pool.Exec(ctx, `UPDATE session_clients SET tools = $3 WHERE session_id = $1 AND client_key_id = $2`, sessionID, clientKeyID, rawOrEmptyArray(tools))
	if err != nil {
		return fmt.Errorf("update client tools: %w", err)
	}
	return nil
}

// SetMCPTools stores the tool definitions discovered at open.
func (s *Store) SetMCPTools(ctx context.Context, sessionID string, tools json.RawMessage) error {
	_, err := s.Pool.Exec(ctx, `UPDATE sessions SET mcp_tools = $2 WHERE id = $1`, sessionID, rawOrEmptyArray(tools))
	if err != nil {
		return fmt.Errorf("store mcp tools: %w", err)
	}
	return nil
}

// SessionAuth is what one authenticated session request needs: the session
// key, its session, the acting client's declarations and the log's head.
type SessionAuth struct {
	Key     Key
	Session Session
	// Decl is the acting client's declarations; DeclFound is false when the
	// client has none on the session.
	Decl      ClientDecl
	DeclFound bool
	// Head is the session's last event sequence when it was read.
	Head int64
}

// SendReads is what a send refused before it is stored (Bae-When-Busy:
// reject) is checked against, read with its authentication: the budgets its
// turn would run under and the session's turn gate. Each read's error is
// kept for the caller to weigh where it checks that read.
type SendReads struct {
	// Budgets is what BudgetsFor(session, the key's client key) reads.
	Budgets    []BudgetState
	BudgetsErr error
	// Gate is the turn gate (TurnGate) when HasGate: read only when asked.
	Gate    TurnGate
	GateErr error
	HasGate bool
	// At is when the reads arrived.
	At time.Time
}

// AuthenticateSession authenticates a session key for sessionID and reads
// the session, the acting client's declarations and the log's head, in one
// query. A key that is unknown, revoked, minted for a client key since
// revoked, or bound to another session is ErrNotFound; a valid key whose
// session row is missing yields a zero Session.ID. Like Authenticate, an
// Argon2id session key not yet verified by this process is found among the
// session's keys and verified once.
func (s *Store) AuthenticateSession(ctx context.Context, secret, sessionID string) (SessionAuth, error) {
	a, _, err := s.authenticateSession(ctx, secret, sessionID, false, false)
	return a, err
}

// AuthenticateSessionForSend is AuthenticateSession that also reads, in
// the same round trip, what a send about to be refused or let in is
// checked against (SendReads): its budgets, and with gate the turn gate (a
// Bae-When-Busy: reject answered from one round trip, not three one after
// the other). Authentication is unchanged (the same statement, the same
// Argon2id verification and cache); the reads are discarded when it fails.
func (s *Store) AuthenticateSessionForSend(ctx context.Context, secret, sessionID string, gate bool) (SessionAuth, *SendReads, error) {
	return s.authenticateSession(ctx, secret, sessionID, true, gate)
}

// authenticateSessionSQL also puts the statements after it in its batch
// (a send's budgets and turn gate) on their generic plans, as
// genericPlansSQL does for a transaction: PostgreSQL planned the budgets
// afresh on most sends. Run on its own, the setting ends with it.
const authenticateSessionSQL = `WITH found AS (
		SELECT sk.* FROM keys sk
		JOIN keys ck ON ck.id = sk.client_key_id AND ck.role = 'client' AND ck.deleted_at IS NULL
		WHERE sk.role = 'session' AND sk.deleted_at IS NULL
		  AND (sk.key_hash = $1 OR sk.id = $2 OR ($2 = '' AND sk.session_id = $3 AND sk.key_hash LIKE '$argon2id$%'))
	), stamp AS (
		UPDATE keys SET last_used_at = now() WHERE id IN (SELECT id FROM found WHERE key_hash = $1 OR id = $2)
		  AND (last_used_at IS NULL OR last_used_at < now() - interval '30 seconds')
	)
	SELECT f.seq, f.id, f.role, f.name, f.prefix, f.key_hash, coalesce(f.profile_id, ''), coalesce(f.session_id, ''),
		coalesce(f.client_key_id, ''), f.created_at, f.last_used_at, s.seq, s.id, s.profile_id, s.client_key_id, s.state, s.client_version, s.mcp_tools, s.created_at, s.closed_at, s.last_event_seq, s.span,
		c.client_key_id, c.client_version, c.tools, c.sandbox_tools, c.subagent_tools, c.registered_at,
		set_config('plan_cache_mode', 'force_generic_plan', true)
	FROM found f
	LEFT JOIN sessions s ON s.id = f.session_id
	LEFT JOIN session_clients c ON c.session_id = s.id AND c.client_key_id = f.client_key_id`

func (s *Store) authenticateSession(ctx context.Context, secret, sessionID string, send, gate bool) (SessionAuth, *SendReads, error) {
	h := ids.HashSecret(secret)
	d := tokenDigest(secret)
	cached, isCached := s.verified.get(d)
	var list []SessionAuth
	var reads *SendReads
	if !send {
		rows, err := s.Pool.Query(ctx, authenticateSessionSQL, h, cached.id, sessionID)
		if err != nil {
			return SessionAuth{}, nil, fmt.Errorf("authenticate session key: %w", err)
		}
		if list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SessionAuth, error) { return scanSessionAuth(r) }); err != nil {
			return SessionAuth{}, nil, fmt.Errorf("authenticate session key: %w", err)
		}
	} else {
		var err error
		if list, reads, err = s.authenticateWithSendReads(ctx, h, cached.id, sessionID, gate); err != nil {
			return SessionAuth{}, nil, err
		}
	}
	keys := make([]Key, len(list))
	for i, a := range list {
		keys[i] = a.Key
	}
	k, verify, ok := matchKey(keys, h, cached, isCached)
	if !ok {
		if isCached {
			s.verified.drop(d)
		}
		for _, c := range verify {
			if good, _ := s.hasher.VerifyPHC(c.Hash, secret); good {
				k, ok = c, true
				s.remember(secret, c)
				if _, err := s.Pool.Exec(ctx, `UPDATE keys SET last_used_at = now() WHERE id = $1`, c.ID); err != nil {
					return SessionAuth{}, nil, fmt.Errorf("stamp key use: %w", err)
				}
				break
			}
		}
	}
	if !ok || k.SessionID != sessionID {
		return SessionAuth{}, nil, ErrNotFound
	}
	if reads != nil && reads.BudgetsErr == nil {
		reads.Budgets = keyBudgetsOf(reads.Budgets, k.ClientKeyID)
	}
	for _, a := range list {
		if a.Key.ID == k.ID {
			return a, reads, nil
		}
	}
	return SessionAuth{}, nil, ErrNotFound
}

// authenticateWithSendReads sends the authentication statement, the
// budgets of the session's client keys and, with gate, the turn gate as
// one batch: one round trip (the batch is one implicit transaction, whose
// statements each read the latest commits, as on their own).
func (s *Store) authenticateWithSendReads(ctx context.Context, h, cachedID, sessionID string, gate bool) ([]SessionAuth, *SendReads, error) {
	b := &pgx.Batch{}
	b.Queue(authenticateSessionSQL, h, cachedID, sessionID)
	b.Queue(budgetsForSessionKeysSQL, sessionID)
	if gate {
		b.Queue(turnGateSQL, sessionID, turnResultsMigration)
	}
	br := s.Pool.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("authenticate session key: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SessionAuth, error) { return scanSessionAuth(r) })
	if err != nil {
		return nil, nil, fmt.Errorf("authenticate session key: %w", err)
	}
	reads := &SendReads{}
	if rows, err := br.Query(); err != nil {
		reads.BudgetsErr = fmt.Errorf("read budgets: %w", err)
	} else if reads.Budgets, err = scanBudgetStates(rows); err != nil {
		reads.BudgetsErr = fmt.Errorf("read budgets: %w", err)
	}
	if gate {
		reads.Gate, reads.GateErr = scanTurnGate(br.QueryRow())
		reads.HasGate = true
	}
	reads.At = time.Now()
	return list, reads, nil
}

func scanSessionAuth(row pgx.Row) (SessionAuth, error) {
	var a SessionAuth
	var (
		sSeq, sHead                    *int64
		sID, sProfile, sClient, sState *string
		sVersion, sSpan                *string
		sMCP                           []byte
		sCreated, sClosed              *time.Time
		dClient, dVersion              *string
		dTools, dSandbox, dSubagent    []byte
		dRegistered                    *time.Time
	)
	if err := row.Scan(
		&a.Key.Seq, &a.Key.ID, &a.Key.Role, &a.Key.Name, &a.Key.Prefix, &a.Key.Hash, &a.Key.ProfileID, &a.Key.SessionID, &a.Key.ClientKeyID, &a.Key.CreatedAt, &a.Key.LastUsedAt,
		&sSeq, &sID, &sProfile, &sClient, &sState, &sVersion, &sMCP, &sCreated, &sClosed, &sHead, &sSpan,
		&dClient, &dVersion, &dTools, &dSandbox, &dSubagent, &dRegistered, nil); err != nil {
		return SessionAuth{}, err
	}
	if sID != nil {
		a.Session = Session{Seq: *sSeq, ID: *sID, ProfileID: *sProfile, ClientKeyID: *sClient, State: *sState, ClientVersion: sVersion,
			MCPTools: sMCP, CreatedAt: *sCreated, ClosedAt: sClosed}
		if sSpan != nil {
			a.Session.Span = *sSpan
		}
		a.Head = *sHead
	}
	if dClient != nil {
		a.DeclFound = true
		a.Decl = ClientDecl{ClientKeyID: *dClient, ClientVersion: dVersion, Tools: dTools, SandboxTools: dSandbox, SubagentTools: dSubagent, Registered: dRegistered != nil}
	}
	return a, nil
}
