package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PutTurnInput stores a driver's message under its turn id. idemKey is the
// client's Idempotency-Key ("" for none), unique per session: when a message
// is already stored under it, nothing is stored and that turn input is
// returned instead (nil when this call stored the message). arrived is
// when the database stored it (the queue's arrival order). A new message
// is refused with *QuotaError when the session, or the client key over
// its open sessions, already holds caps' queued turns (stored, not yet
// begun): counted under a lock on each, so the caps hold across replicas
// and concurrent sends. See PutTurn for what else it reports.
func (s *Store) PutTurnInput(ctx context.Context, sessionID, turnID, clientKeyID string, message json.RawMessage, idemKey string, caps Caps) (PutTurn, error) {
	if caps.QueuedTurnsPerSession <= 0 && caps.QueuedTurnsPerKey <= 0 {
		return putTurnInput(ctx, s.Pool, sessionID, turnID, clientKeyID, message, idemKey)
	}
	// One round trip: a batch is one implicit transaction, so the locks are
	// held until it ends, and a failed check aborts the insert with it.
	// Each statement reads the commits made before it began (READ
	// COMMITTED), so the counts, after the locks, see every send before.
	b := &pgx.Batch{}
	b.Queue(lockQueuesSQL, clientKeyID, sessionID)
	b.Queue(putTurnInputCappedSQL, turnID, sessionID, clientKeyID, string(message), idemKey, turnResultsMigration, maxAhead,
		caps.QueuedTurnsPerSession, caps.QueuedTurnsPerKey)
	if idemKey != "" {
		b.Queue(priorTurnInputSQL, sessionID, idemKey, turnID)
	}
	br := s.Pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return PutTurn{}, fmt.Errorf("lock the turn queues: %w", err)
	}
	put, stored, err := scanPut(br.QueryRow())
	switch {
	case err != nil:
		return PutTurn{}, queueFull(err, caps)
	case stored || idemKey == "":
		return put, br.Close() // stored, or this very turn id stored before
	}
	// Nothing stored: a message is stored under the key (or this very turn
	// id was, under it).
	ti, err := scanTurnInputByKey(br.QueryRow(), sessionID)
	if errors.Is(err, ErrNotFound) {
		return PutTurn{}, br.Close()
	}
	if err != nil {
		return PutTurn{}, err
	}
	return PutTurn{Arrived: ti.Arrived, Prior: &ti}, br.Close()
}

// lockQueuesSQL takes the transaction's locks on the client key's and the
// session's queues, key first (one order everywhere): two sends count their
// queued turns one after the other. Advisory locks, so nothing else that
// locks the key's or the session's row waits for them. It also puts the
// batch's statements after it on their generic plans (see genericPlansSQL):
// the insert was otherwise planned afresh on every send.
const lockQueuesSQL = `SELECT pg_advisory_xact_lock(hashtextextended('bae.queue.key/' || $1, 0)),
		pg_advisory_xact_lock(hashtextextended('bae.queue.session/' || $2, 0)),
		set_config('plan_cache_mode', 'force_generic_plan', true)`

// putTurnInputCappedSQL is putTurnInputSQL that first refuses one more
// queued turn once the session ($8), or the client key over its open
// sessions ($9), holds its cap of them (0: no cap): bae_check fails the
// statement with checkQueueFull, its message the scope. A resend (a
// message stored under the key $5) stores nothing, so no cap refuses it.
// CASE fixes the order: the resend, the session's cap, the key's.
var putTurnInputCappedSQL = `INSERT INTO turn_inputs (turn_id, session_id, client_key_id, message, idem_key)
	SELECT $1, $2, $3, $4, NULLIF($5, '')
	WHERE CASE
		WHEN $5 <> '' AND EXISTS (SELECT 1 FROM turn_inputs WHERE session_id = $2 AND idem_key = $5) THEN true
		WHEN NOT bae_check($8 <= 0 OR (SELECT count(*) FILTER (WHERE begin_result IS NULL) FROM turn_inputs
			WHERE session_id = $2 AND result IS NULL) < $8, '` + checkQueueFull + `', '` + ScopeSession + `') THEN false
		ELSE bae_check($9 <= 0 OR (SELECT count(*) FROM turn_inputs t JOIN sessions s ON s.id = t.session_id
			WHERE t.client_key_id = $3 AND t.begin_result IS NULL AND t.result IS NULL AND s.state = 'open') < $9, '` + checkQueueFull + `', '` + ScopeClientKey + `')
	END
	ON CONFLICT DO NOTHING ` + putTurnInputReturning

// priorTurnInputSQL reads, after the insert, the message another turn
// stored under the key: none when the insert stored this one.
const priorTurnInputSQL = `SELECT turn_id, client_key_id, message, begin_result, created_at FROM turn_inputs
	WHERE session_id = $1 AND idem_key = $2 AND turn_id <> $3`

// queueFull is the *QuotaError of a refused insert, err otherwise.
func queueFull(err error, caps Caps) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != checkQueueFull {
		return fmt.Errorf("store turn input: %w", err)
	}
	if pgErr.Message == ScopeClientKey {
		return &QuotaError{Scope: ScopeClientKey, Resource: ResourceQueuedTurns, Limit: caps.QueuedTurnsPerKey}
	}
	return &QuotaError{Scope: ScopeSession, Resource: ResourceQueuedTurns, Limit: caps.QueuedTurnsPerSession}
}

// PutTurn is what PutTurnInput did. Prior is the turn input already
// stored under the idempotency key (nothing was stored). Otherwise Arrived
// is when the database stored the message (the queue's arrival order),
// and Ahead are the session's other unfinished messages (queued or
// running) at that moment, oldest first, read in the same statement:
// Idle (none) lets the turn take the workflow's SendIdle path; some, and
// its signal names them, so the workflow runs them first even when their
// own submission reaches it later or was lost (see
// workflows.SendMessageInput.Ahead). A turn id stored before reports
// neither Arrived nor Idle.
type PutTurn struct {
	Arrived time.Time
	Idle    bool
	Ahead   []UnfinishedTurn
	Prior   *TurnInput
}

// UnfinishedTurn is a stored message without a recorded result, as
// PutTurnInput saw it ahead of the one it stored.
type UnfinishedTurn struct {
	TurnID      string `json:"t"`
	ClientKeyID string `json:"k"`
	// Arrived is when it was stored, in Unix microseconds.
	Arrived int64 `json:"a"`
}

// maxAhead bounds the unfinished messages PutTurnInput returns: the most
// recent ones (the queue caps keep a session's queue shorter by default).
const maxAhead = 16

// QueueRoom is PutTurnInput's cap check without its locks, for a caller
// about to act on the strength of a send (interrupt the running turn for
// it): nil when the queues had room as it read them, *QuotaError when
// not. PutTurnInput still decides.
func (s *Store) QueueRoom(ctx context.Context, caps Caps, sessionID, clientKeyID string) error {
	return checkQueueCaps(ctx, s.Pool, caps, sessionID, clientKeyID)
}

// checkQueueCaps refuses one more queued turn once the session, or the
// client key over its open sessions, holds its cap of them.
// The session's queued turns are counted among its unfinished ones
// (FILTER, not WHERE, on begin_result): so the count reads the session's
// unfinished rows (turn_inputs_unfinished), never every queued row of the
// key (turn_inputs_queued_key, whose predicate a WHERE would match). As in
// putTurnInputCappedSQL.
func checkQueueCaps(ctx context.Context, tx dbtx, caps Caps, sessionID, clientKeyID string) error {
	if n := caps.QueuedTurnsPerSession; n > 0 {
		var held int
		if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE begin_result IS NULL) FROM turn_inputs
			WHERE session_id = $1 AND result IS NULL`, sessionID).Scan(&held); err != nil {
			return fmt.Errorf("count the session's queued turns: %w", err)
		}
		if held >= n {
			return &QuotaError{Scope: ScopeSession, Resource: ResourceQueuedTurns, Limit: n}
		}
	}
	if n := caps.QueuedTurnsPerKey; n > 0 {
		var held int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM turn_inputs t JOIN sessions s ON s.id = t.session_id
			WHERE t.client_key_id = $1 AND t.begin_result IS NULL AND t.result IS NULL AND s.state = 'open'`, clientKeyID).Scan(&held); err != nil {
			return fmt.Errorf("count the key's queued turns: %w", err)
		}
		if held >= n {
			return &QuotaError{Scope: ScopeClientKey, Resource: ResourceQueuedTurns, Limit: n}
		}
	}
	return nil
}

// putTurnInput stores the message. Its RETURNING subquery reads the
// statement's snapshot, without the new row: the session's other messages
// without a recorded result (since turn results were recorded, as in
// TurnGate), the most recent maxAhead of them, oldest first.
func putTurnInput(ctx context.Context, db dbtx, sessionID, turnID, clientKeyID string, message json.RawMessage, idemKey string) (PutTurn, error) {
	put, stored, err := scanPut(db.QueryRow(ctx, putTurnInputSQL, turnID, sessionID, clientKeyID, string(message), idemKey, turnResultsMigration, maxAhead))
	switch {
	case err != nil:
		return PutTurn{}, fmt.Errorf("store turn input: %w", err)
	case stored || idemKey == "":
		return put, nil // stored, or this very turn id stored before
	}
	// Another request stored a message under this key first.
	ti, err := turnInputByKey(ctx, db, sessionID, idemKey)
	if errors.Is(err, ErrNotFound) {
		return PutTurn{}, nil // the conflict was this very turn id, stored before
	}
	if err != nil {
		return PutTurn{}, err
	}
	return PutTurn{Arrived: ti.Arrived, Prior: &ti}, nil
}

var putTurnInputSQL = `INSERT INTO turn_inputs (turn_id, session_id, client_key_id, message, idem_key) VALUES ($1, $2, $3, $4, NULLIF($5, ''))
	ON CONFLICT DO NOTHING ` + putTurnInputReturning

// putTurnInputReturning: the stored message's arrival and the unfinished
// turns ahead of it ($2 the session, $6 turnResultsMigration, $7 maxAhead).
var putTurnInputReturning = `RETURNING created_at, ` + unfinishedAheadSQL("$1", "$2", "$6", "$7", "true")

// scanPut reads what putTurnInputSQL returned; stored is false when it
// stored nothing (a conflict).
func scanPut(row pgx.Row) (put PutTurn, stored bool, err error) {
	var aheadJSON []byte
	err = row.Scan(&put.Arrived, &aheadJSON)
	if errors.Is(err, pgx.ErrNoRows) {
		return PutTurn{}, false, nil
	}
	if err != nil {
		return PutTurn{}, false, err
	}
	if put.Ahead, err = decodeAhead(aheadJSON); err != nil {
		return PutTurn{}, false, err
	}
	put.Idle = len(put.Ahead) == 0
	return put, true, nil
}

// unfinishedAheadSQL is the JSON list of the session's messages without a
// recorded result (since turn results were recorded, as in TurnGate) that
// also meet cond, other than the turn's own, the most recent limit of
// them, oldest first. turn, session, migration (turnResultsMigration) and
// limit name the statement's parameters.
func unfinishedAheadSQL(turn, session, migration, limit, cond string) string {
	return `(SELECT json_agg(json_build_object('t', a.turn_id, 'k', a.client_key_id,
				'a', (extract(epoch FROM a.created_at) * 1000000)::bigint) ORDER BY a.created_at)
			FROM (SELECT t.turn_id, t.client_key_id, t.created_at FROM turn_inputs t WHERE t.session_id = ` + session + ` AND t.result IS NULL
				AND t.turn_id <> ` + turn + ` AND (` + cond + `)
				AND t.created_at >= COALESCE((SELECT applied_at FROM schema_migrations WHERE version = ` + migration + `), '-infinity')
				ORDER BY t.created_at DESC LIMIT ` + limit + `) a)`
}

// decodeAhead reads unfinishedAheadSQL's list (NULL: none).
func decodeAhead(aheadJSON []byte) ([]UnfinishedTurn, error) {
	if len(aheadJSON) == 0 {
		return nil, nil
	}
	var ahead []UnfinishedTurn
	if err := json.Unmarshal(aheadJSON, &ahead); err != nil {
		return nil, fmt.Errorf("decode the unfinished turns ahead: %w", err)
	}
	return ahead, nil
}

// TurnsAhead are the session's unfinished messages stored before turnID,
// oldest first: what PutTurnInput reported for it when it was stored, as
// it stands now. A turn submitted again (a resend, the orphan sweep, a
// stranded turn's check) carries them as its first submission did, so the
// workflow still runs them first: among them may be a turn whose begin
// committed in a workflow task that was lost, which the next turn's begin
// would otherwise take out of the conversation.
func (s *Store) TurnsAhead(ctx context.Context, sessionID, turnID string) ([]UnfinishedTurn, error) {
	var aheadJSON []byte
	err := s.Pool.QueryRow(ctx, `SELECT `+unfinishedAheadSQL("$1", "$2", "$3", "$4",
		`t.created_at < (SELECT created_at FROM turn_inputs WHERE turn_id = $1)`),
		turnID, sessionID, turnResultsMigration, maxAhead).Scan(&aheadJSON)
	if err != nil {
		return nil, fmt.Errorf("read the unfinished turns ahead of %s: %w", turnID, err)
	}
	return decodeAhead(aheadJSON)
}

// TurnOfSession reports whether turnID is a turn of sessionID: turn ids
// reach every observer of their session, so one named by a caller is
// checked before anything acts on it.
func (s *Store) TurnOfSession(ctx context.Context, sessionID, turnID string) (bool, error) {
	var ok bool
	if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM turn_inputs WHERE turn_id = $1 AND session_id = $2)`, turnID, sessionID).Scan(&ok); err != nil {
		return false, fmt.Errorf("check the turn's session: %w", err)
	}
	return ok, nil
}

// TurnInputByKey finds the message a session stored under an idempotency
// key.
func (s *Store) TurnInputByKey(ctx context.Context, sessionID, idemKey string) (TurnInput, error) {
	return turnInputByKey(ctx, s.Pool, sessionID, idemKey)
}

func turnInputByKey(ctx context.Context, db dbtx, sessionID, idemKey string) (TurnInput, error) {
	return scanTurnInputByKey(db.QueryRow(ctx, `SELECT turn_id, client_key_id, message, begin_result, created_at FROM turn_inputs WHERE session_id = $1 AND idem_key = $2`, sessionID, idemKey), sessionID)
}

func scanTurnInputByKey(row pgx.Row, sessionID string) (TurnInput, error) {
	ti := TurnInput{SessionID: sessionID}
	var msg, begin []byte
	err := row.Scan(&ti.TurnID, &ti.ClientKeyID, &msg, &begin, &ti.Arrived)
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnInput{}, ErrNotFound
	}
	if err != nil {
		return TurnInput{}, fmt.Errorf("read turn input by key: %w", err)
	}
	ti.Message, ti.BeginResult = msg, begin
	return ti, nil
}

// TurnInput is a stored driver message and, once the turn began, the
// recorded outcome of BeginTurn.
type TurnInput struct {
	TurnID      string
	SessionID   string
	ClientKeyID string
	Message     json.RawMessage
	BeginResult json.RawMessage
	// Result is the turn's recorded result (nil until it ended; only
	// where read with it).
	Result json.RawMessage
	// Arrived is when the message was stored (where read with it).
	Arrived time.Time
}

// TurnInput reads and locks a turn input.
func (t *Tx) TurnInput(ctx context.Context, turnID string) (TurnInput, error) {
	tx := t.db
	var ti TurnInput
	var msg, begin []byte
	err := tx.QueryRow(ctx, `SELECT session_id, client_key_id, message, begin_result FROM turn_inputs WHERE turn_id = $1 FOR UPDATE`, turnID).
		Scan(&ti.SessionID, &ti.ClientKeyID, &msg, &begin)
	ti.TurnID = turnID
	if errors.Is(err, pgx.ErrNoRows) {
		return TurnInput{}, ErrNotFound
	}
	if err != nil {
		return TurnInput{}, fmt.Errorf("read turn input: %w", err)
	}
	ti.Message, ti.BeginResult = msg, begin
	return ti, nil
}

// SetBeginResult records BeginTurn's outcome for idempotent re-runs. The
// write goes to the server with the transaction's next round trip.
func (t *Tx) SetBeginResult(turnID string, result any) error {
	b, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("marshal begin result: %w", err)
	}
	t.db.queue(queuedWrite{what: "store begin result", sql: `UPDATE turn_inputs SET begin_result = $2 WHERE turn_id = $1`, args: []any{turnID, string(b)}, rows: -1,
		beginResultOf: turnID})
	return nil
}

// EventByIdem returns a stored event by its idempotency key.
func (s *Store) EventByIdem(ctx context.Context, sessionID, idemKey string) (Event, error) {
	e, err := scanEvent(s.Pool.QueryRow(ctx, `SELECT `+eventCols+` FROM session_events WHERE session_id = $1 AND idem_key = $2`, sessionID, idemKey))
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, fmt.Errorf("get event: %w", err)
	}
	evs := []Event{e}
	if err := s.materialize(ctx, s.Pool, sessionID, evs); err != nil {
		return Event{}, err
	}
	return evs[0], nil
}

// OrphanTurn is a stored driver message whose turn never began.
type OrphanTurn struct {
	TurnID      string
	SessionID   string
	ProfileID   string
	ClientKeyID string
	Arrived     time.Time
}

// OrphanTurns lists messages of open sessions stored more than olderThan ago
// whose BeginTurn never ran and that have no result, oldest first: their
// submission to the workflow may have been lost (the server died between
// storing and signalling), or they are still waiting in the session's queue;
// the sweep asks the workflow which.
func (s *Store) OrphanTurns(ctx context.Context, olderThan time.Duration, limit int) ([]OrphanTurn, error) {
	rows, err := s.Pool.Query(ctx, `SELECT t.turn_id, t.session_id, s.profile_id, t.client_key_id, t.created_at FROM turn_inputs t
		JOIN sessions s ON s.id = t.session_id
		WHERE t.begin_result IS NULL AND t.result IS NULL AND s.state = 'open' AND t.created_at < now() - make_interval(secs => $1)
		ORDER BY t.created_at LIMIT $2`, olderThan.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("list orphan turns: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (OrphanTurn, error) {
		var o OrphanTurn
		err := r.Scan(&o.TurnID, &o.SessionID, &o.ProfileID, &o.ClientKeyID, &o.Arrived)
		return o, err
	})
}

// AttemptInputs is what a provider attempt reads before it calls: a
// response a previous run of the attempt already stored, and what the
// acting client's tools are made of.
type AttemptInputs struct {
	// Stored is the attempt's stored response event, nil when none.
	Stored *Event
	Decl   ClientDecl
	// MCPTools are the session's MCP tool definitions.
	MCPTools json.RawMessage
	// TrackedSubagents is whether the session has subagents to report.
	TrackedSubagents bool
	// ModelSettings are the session profile's model_settings overrides
	// (nil: none).
	ModelSettings json.RawMessage
}

// AttemptInputs reads an attempt's inputs in one round trip.
func (t *Tx) AttemptInputs(ctx context.Context, sessionID, clientKeyID, respIdem string) (AttemptInputs, error) {
	tx := t.db
	b := &pgx.Batch{}
	queueAttemptInputs(b, sessionID, clientKeyID, respIdem)
	br := tx.SendBatch(ctx, b)
	in, err := readAttemptInputs(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return in, err
}

func queueAttemptInputs(b *pgx.Batch, sessionID, clientKeyID, respIdem string) {
	b.Queue(`SELECT `+eventCols+` FROM session_events WHERE session_id = $1 AND idem_key = $2`, sessionID, respIdem)
	// The client's declarations and the session's attempt settings in one
	// statement: no row when the session is missing, the declarations'
	// columns NULL when the client key declared nothing.
	b.Queue(`SELECT c.client_key_id, c.client_version, c.tools, c.sandbox_tools, c.subagent_tools, c.registered_at,
		s.mcp_tools, EXISTS (SELECT 1 FROM subagents WHERE session_id = $1 AND evicted_at IS NULL),
		(SELECT p.model_settings FROM profiles p WHERE p.id = s.profile_id)
		FROM sessions s LEFT JOIN session_clients c ON c.session_id = s.id AND c.client_key_id = $2
		WHERE s.id = $1`, sessionID, clientKeyID)
}

func readAttemptInputs(br pgx.BatchResults) (AttemptInputs, error) {
	var in AttemptInputs
	ev, err := scanEvent(br.QueryRow())
	switch {
	case err == nil:
		in.Stored = &ev
	case !errors.Is(err, pgx.ErrNoRows):
		return in, fmt.Errorf("get event: %w", err)
	}
	var tools, sb, sub []byte
	var reg *time.Time
	var keyID *string
	var mcp []byte
	var settings []byte
	err = br.QueryRow().Scan(&keyID, &in.Decl.ClientVersion, &tools, &sb, &sub, &reg, &mcp, &in.TrackedSubagents, &settings)
	if err == nil && keyID == nil || errors.Is(err, pgx.ErrNoRows) {
		// No declarations (a missing session has none either).
		err = ErrNotFound
	}
	if err != nil {
		return in, fmt.Errorf("load client declarations: %w", err)
	}
	in.Decl.ClientKeyID = *keyID
	in.Decl.Tools, in.Decl.SandboxTools, in.Decl.SubagentTools, in.Decl.Registered = tools, sb, sub, reg != nil
	in.MCPTools, in.ModelSettings = mcp, settings
	return in, nil
}

// BeginInputs is everything BeginTurn reads, in the order its locks are
// taken: the turn input, the acting client key (share-locked, before the
// session row, the order a revocation takes them), the session row (locked)
// with its paused turn, the conversation's last message and the profile.
type BeginInputs struct {
	Input    TurnInput
	InputErr error // ErrNotFound when the turn input is missing
	KeyLive  bool
	Pending  *PendingTurn
	State    string
	Session  Session
	// Profile is the session's live profile; ProfileErr is ErrNotFound when
	// it was deleted.
	Profile    Profile
	ProfileErr error
	// Tail is the conversation's last message still in it, when its last
	// change was an append; nil otherwise (an empty conversation, or one
	// whose last change was a removal: Tx.RepairConversation finds it).
	Tail *TailMessage
}

// TailMessage is the conversation's last message, for Tx.RepairConversation.
type TailMessage struct {
	IdemKey string
	Role    string
	Content json.RawMessage
}

// Answered reports a tail that ends an exchange: an assistant message
// that asks for no tool.
func (m *TailMessage) Answered() bool {
	return m.Role == "assistant" && !asksForTool(m.Content)
}

// BegunUnended are the session's turns other than turnID that began (their
// begin is stored), have no recorded result and still have messages in
// the conversation, oldest first: turns whose workflow task was lost
// after their begin committed, which the next begin would otherwise take
// out of the conversation as unfinished.
func (t *Tx) BegunUnended(ctx context.Context, sessionID, turnID string) ([]UnfinishedTurn, error) {
	var aheadJSON []byte
	err := t.db.QueryRow(ctx, `SELECT `+unfinishedAheadSQL("$1", "$2", "$3", "$4", `t.begin_result IS NOT NULL
			AND EXISTS (SELECT 1 FROM session_messages m WHERE m.session_id = t.session_id
				AND starts_with(m.idem_key, t.turn_id || '/') AND m.dropped_seq IS NULL)`),
		turnID, sessionID, turnResultsMigration, maxAhead).Scan(&aheadJSON)
	if err != nil {
		return nil, fmt.Errorf("read the turns begun and not ended: %w", err)
	}
	return decodeAhead(aheadJSON)
}

// BeginInputs reads BeginTurn's inputs in one round trip.
func (t *Tx) BeginInputs(ctx context.Context, turnID, sessionID, clientKeyID string) (BeginInputs, error) {
	tx := t.db
	var in BeginInputs
	b := &pgx.Batch{}
	b.Queue(`SELECT session_id, client_key_id, message, begin_result FROM turn_inputs WHERE turn_id = $1 FOR UPDATE`, turnID)
	b.Queue(`SELECT deleted_at IS NULL FROM keys WHERE id = $1 AND role = 'client' FOR SHARE`, clientKeyID)
	b.Queue(beginSessionSQL, sessionID)
	br := tx.SendBatch(ctx, b)
	defer br.Close()

	var msg, begin []byte
	err := br.QueryRow().Scan(&in.Input.SessionID, &in.Input.ClientKeyID, &msg, &begin)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		in.InputErr = ErrNotFound
		return in, nil
	case err != nil:
		return in, fmt.Errorf("read turn input: %w", err)
	}
	in.Input.Message, in.Input.BeginResult = msg, begin
	if len(begin) > 0 {
		return in, nil // a re-run: the first run's answer is all it needs
	}
	if err := br.QueryRow().Scan(&in.KeyLive); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return in, fmt.Errorf("check client key: %w", err)
	}
	var (
		pending       []byte
		mcp           []byte
		tail          TailMessage
		tailKey       *string
		tailRole      *string
		tailContent   []byte
		profileID     *string
		p             Profile
		pName, pPrim  *string
		pSeq          *int64
		pCreated, pUp *time.Time
	)
	s := &in.Session
	err = br.QueryRow().Scan(&pending, &in.State,
		&s.Seq, &s.ID, &s.ProfileID, &s.ClientKeyID, &s.State, &s.ClientVersion, &mcp, &s.CreatedAt, &s.ClosedAt, &s.Span,
		&tailKey, &tailRole, &tailContent,
		&pSeq, &profileID, &pName, &pPrim, &p.FallbackProviders, &p.MCPServers, &p.AllowedTools, &p.AvailableSandboxes, &p.Sandbox,
		&p.Context, &p.ModelSettings, &p.Approvals, &pCreated, &pUp)
	if err != nil {
		return in, fmt.Errorf("read session: %w", err)
	}
	s.MCPTools = mcp
	if len(pending) > 0 {
		var p PendingTurn
		if err := json.Unmarshal(pending, &p); err != nil {
			return in, fmt.Errorf("decode pending turn: %w", err)
		}
		in.Pending = &p
	}
	if tailKey != nil {
		tail.IdemKey, tail.Role, tail.Content = *tailKey, *tailRole, tailContent
		in.Tail = &tail
	}
	if profileID == nil {
		in.ProfileErr = ErrNotFound
	} else {
		p.ID, p.Seq, p.Name, p.PrimaryProvider, p.CreatedAt, p.UpdatedAt = *profileID, *pSeq, *pName, *pPrim, *pCreated, *pUp
		in.Profile = p
	}
	return in, br.Close()
}

// beginSessionSQL is the begin's one read of the session row: locked, with
// the conversation's last message (when its last change was an append:
// one probe of the primary key, see TailMessage) and the live profile
// joined on it. Should the lock wait for a concurrent update, the joined
// rows are of the statement's snapshot: a message appended meanwhile is
// not seen, so the tail reads NULL (never a stale message: its seq is the
// updated counter) and RepairConversationFrom reads it instead.
const beginSessionSQL = `WITH s AS MATERIALIZED (
		SELECT * FROM sessions WHERE id = $1 FOR UPDATE
	)
	SELECT s.pending_turn, s.state,
		s.seq, s.id, s.profile_id, s.client_key_id, s.state, s.client_version, s.mcp_tools, s.created_at, s.closed_at, coalesce(s.span, ''),
		m.idem_key, m.role, m.content,
		p.seq, p.id, p.name, p.primary_provider, p.fallback_providers, p.mcp_servers, p.allowed_tools, p.available_sandboxes,
		coalesce(p.sandbox, '{}'), p.context, p.model_settings, p.approvals, p.created_at, p.updated_at
	FROM s
	LEFT JOIN session_messages m ON m.session_id = s.id AND m.seq = s.last_message_seq AND m.dropped_seq IS NULL
	LEFT JOIN profiles p ON p.id = s.profile_id AND p.deleted_at IS NULL`

// streamRunSQL numbers a new run of a turn's provider call ($1 the turn,
// $2 the step) and returns the run and the step before it.
const streamRunSQL = `
		WITH prev AS (SELECT stream_step FROM turn_inputs WHERE turn_id = $1)
		UPDATE turn_inputs SET stream_runs = stream_runs + 1, stream_step = $2
		WHERE turn_id = $1
		RETURNING stream_runs, (SELECT stream_step FROM prev)`

// streamRunBeginSQL is streamRunSQL storing the turn's begin result ($3)
// in the same update: the begin's first run and its result, one version
// of the turn's row instead of two.
const streamRunBeginSQL = `
		WITH prev AS (SELECT stream_step FROM turn_inputs WHERE turn_id = $1)
		UPDATE turn_inputs SET stream_runs = stream_runs + 1, stream_step = $2, begin_result = $3::json
		WHERE turn_id = $1
		RETURNING stream_runs, (SELECT stream_step FROM prev)`

// queueStreamRun queues the numbering of a run of turnID's provider call
// in b, with the turn's begin result when one is queued (it then leaves
// the queue: the same rows, one update fewer).
func (t *Tx) queueStreamRun(b *pgx.Batch, turnID, step string) {
	if mergeBeginResult {
		if r, ok := t.db.takeBeginResult(turnID); ok {
			b.Queue(streamRunBeginSQL, turnID, step, r)
			return
		}
	}
	b.Queue(streamRunSQL, turnID, step)
}

// mergeBeginResult is off only in tests that count the turn row's
// versions without the merge.
var mergeBeginResult = true

// StreamRunNo is a numbered run of a turn's provider call: Run from 1, and
// PrevStep the step of the run before it ("" for the turn's first).
type StreamRunNo struct {
	Run      int64
	PrevStep string
}

func scanStreamRun(row pgx.Row, turnID string) (StreamRunNo, error) {
	var n StreamRunNo
	var prev *string
	if err := row.Scan(&n.Run, &prev); err != nil {
		return n, fmt.Errorf("number stream run of %s: %w", turnID, err)
	}
	if prev != nil {
		n.PrevStep = *prev
	}
	return n, nil
}

// StreamRun numbers a new run of a turn's provider call (step names the
// attempt, "i0/a1"), in its own transaction.
func (s *Store) StreamRun(ctx context.Context, turnID, step string) (StreamRunNo, error) {
	return scanStreamRun(s.Pool.QueryRow(ctx, streamRunSQL, turnID, step), turnID)
}

// RecordDeltaEnd records, with the provider response respIdem stores, the
// sequence of the last live delta the run that answered published: a
// stream relaying the response holds every delta up to it first, or says
// it does not (see api's deltaStream). Held back to go with the commit;
// queued after the response's append, so that a second run storing the
// same response waits for the first's commit and finds its end there.
func (t *Tx) RecordDeltaEnd(d DeltaEnd) {
	t.db.queue(queuedWrite{what: "record delta end", sql: recordDeltaEndSQL, rows: -1, args: []any{d.TurnID, d.RespIdem, d.Seq}})
}

// DeltaEnd is the last live delta (Seq) of the run that stored the
// provider response RespIdem of TurnID.
type DeltaEnd struct {
	TurnID, RespIdem string
	Seq              int64
}

// recordDeltaEndSQL keeps an end already recorded: the stored response is
// the first run's, and so are its deltas. A row holding the key is left
// as it is (no new row version; the right operand of || would win anyway).
const recordDeltaEndSQL = `UPDATE turn_inputs SET delta_ends = jsonb_build_object($2::text, $3::bigint) || coalesce(delta_ends, '{}'::jsonb)
	WHERE turn_id = $1 AND NOT coalesce(delta_ends ? $2::text, false)`

// DeltaEnd is the sequence of the last live delta of the run whose answer
// the provider response respIdem of turnID is (RecordDeltaEnd); 0 when
// none was recorded (the call sent no deltas, or a replica of a version
// before this record stored it).
func (s *Store) DeltaEnd(ctx context.Context, turnID, respIdem string) (int64, error) {
	var seq *int64
	err := s.Pool.QueryRow(ctx, `SELECT (delta_ends->>$2::text)::bigint FROM turn_inputs WHERE turn_id = $1`, turnID, respIdem).Scan(&seq)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read delta end of %s: %w", respIdem, err)
	case seq == nil:
		return 0, nil
	}
	return *seq, nil
}

// AppendEventsNumberingRun is Tx.AppendEvents that also numbers a new run
// of the turn's provider call (as Store.StreamRun, committed with the
// transaction) in the append's round trip: for a compacting attempt, which
// knows only after its reads whether it calls. Run is 0 when the turn has
// no stored input to number.
func (t *Tx) AppendEventsNumberingRun(ctx context.Context, sessionID string, evs []NewEvent, turnID, step string) ([]Event, StreamRunNo, error) {
	var run StreamRunNo
	p, err := planAppend(sessionID, evs, false)
	if err != nil {
		return nil, run, err
	}
	b := &pgx.Batch{}
	p.queue(b)
	t.queueStreamRun(b, turnID, step)
	br := t.db.SendBatch(ctx, b)
	out, inserted, err := p.read(br)
	if err == nil {
		if run, err = scanStreamRun(br.QueryRow(), turnID); errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("append events: %w", cerr)
	}
	if err == nil {
		err = appended(ctx, t.db, sessionID, inserted)
	}
	if err != nil {
		return nil, run, err
	}
	t.s.noteSummaries(sessionID, evs)
	return out, run, nil
}
