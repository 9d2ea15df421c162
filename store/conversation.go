package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/compaction"
)

// DefaultConversationCacheBytes bounds the conversations a process keeps
// encoded in memory (see convCache).
const DefaultConversationCacheBytes = 64 << 20

// convCache keeps each session's conversation as this process last read it,
// already encoded as the provider-facing JSON messages, so a provider call
// reads only the messages appended since instead of the whole history, and
// a provider.request event, which names its conversation by reference, is
// materialized without a query.
//
// Every change to a conversation takes the next value of the session's
// message counter (sessions.last_message_seq): an append gives it to its
// row as seq, a removal (Tx.RepairConversation) marks the removed rows with
// it as dropped_seq. Rows are never deleted, so the conversation as of any
// counter value N is: the rows with seq <= N that were not dropped at or
// before N. A reader that last saw counter L reads the rows appended or
// dropped after L; if those do not account for every value up to the new
// counter, it starts again from the full history.
type convCache struct {
	mu      sync.Mutex
	entries map[string]*convEntry
	bytes   int
	budget  int
}

type convEntry struct {
	mu   sync.Mutex // serialises reads and refreshes of one session
	last int64      // the message counter the entry reflects
	msgs []cachedMsg
	// buf holds the encoded messages joined by commas, in seq order.
	buf []byte
	// drops are the counter values of removals, ascending.
	drops []int64
	used  time.Time
	size  int // bytes accounted in convCache.bytes
	// summaries are the texts of the summaries stored compacted requests
	// name, by compaction id, as read or written (a summary never changes).
	summaries map[string]string
}

type cachedMsg struct {
	seq     int64
	dropped int64 // 0 while in the conversation
	idem    string
	role    string
	// start and end delimit the encoded message in buf, cstart its content.
	start, cstart, end int
	raw                json.RawMessage // as read, until encoded
}

func newConvCache(budget int) *convCache {
	if budget <= 0 {
		budget = DefaultConversationCacheBytes
	}
	return &convCache{entries: map[string]*convEntry{}, budget: budget}
}

func (c *convCache) entry(sessionID string) *convEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[sessionID]
	if e == nil {
		e = &convEntry{}
		c.entries[sessionID] = e
	}
	e.used = time.Now()
	return e
}

// account records an entry's new size and evicts the least recently used
// entries while the cache is over budget.
func (c *convCache) account(sessionID string, e *convEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[sessionID] != e {
		return // forgotten meanwhile
	}
	size := cap(e.buf) + len(e.msgs)*96
	for id, text := range e.summaries {
		size += len(id) + len(text)
	}
	c.bytes += size - e.size
	e.size = size
	for c.bytes > c.budget && len(c.entries) > 1 {
		var oldest string
		var at time.Time
		for id, x := range c.entries {
			if id != sessionID && (oldest == "" || x.used.Before(at)) {
				oldest, at = id, x.used
			}
		}
		if oldest == "" {
			return
		}
		c.bytes -= c.entries[oldest].size
		delete(c.entries, oldest)
	}
}

// forget drops a session's entry (a failed refresh may have left it half
// read).
func (c *convCache) forget(sessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[sessionID]; e != nil {
		c.bytes -= e.size
		delete(c.entries, sessionID)
	}
}

// refresh brings e up to date with the database in one round trip: the
// counter, the rows appended after the cached counter and the cached rows
// dropped since.
func (e *convEntry) refresh(ctx context.Context, q dbtx, sessionID string) error {
	for range 2 {
		b := &pgx.Batch{}
		e.queue(b, sessionID)
		br := q.SendBatch(ctx, b)
		complete, err := e.apply(ctx, q, br, sessionID)
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("read conversation: %w", cerr)
		}
		if err != nil || complete {
			return err
		}
		// Something changed that the rows read do not account for: start
		// over from the full history.
		e.last, e.msgs, e.buf, e.drops = 0, nil, nil, nil
	}
	return errors.New("read conversation: the conversation kept changing")
}

// queue adds refresh's read to b: the counter and the rows appended since,
// in one statement (one row with the counter alone when none was).
func (e *convEntry) queue(b *pgx.Batch, sessionID string) {
	b.Queue(conversationSinceSQL, sessionID, e.last)
}

// conversationSinceSQL is the session's message counter on every row of
// the messages after $2 (a row with NULL columns but the counter when
// there are none; no row when the session is missing), in seq order.
var conversationSinceSQL = `SELECT s.last_message_seq, m.seq, m.idem_key, m.role, m.content, coalesce(m.dropped_seq, 0)
	FROM sessions s LEFT JOIN ` + conversationRows("$1", "m.seq > $2") + ` m ON true
	WHERE s.id = $1 ORDER BY m.seq`

// drop is a cached row taken out of the conversation at counter at.
type drop struct{ seq, at int64 }

// droppedSince reads the rows dropped after the cached counter, which only
// a removal since needs.
func (e *convEntry) droppedSince(ctx context.Context, q dbtx, sessionID string) ([]drop, error) {
	rows, err := q.Query(ctx, `SELECT seq, dropped_seq FROM `+conversationRows("$1", "m.dropped_seq IS NOT NULL")+` m
		WHERE dropped_seq > $2 ORDER BY seq`, sessionID, e.last)
	if err != nil {
		return nil, fmt.Errorf("read conversation: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (drop, error) {
		var d drop
		err := r.Scan(&d.seq, &d.at)
		return d, err
	})
}

// apply reads queue's results and applies them. When the rows appended do
// not account for every counter value since, something was taken out: it
// reads the rows dropped since (after the batch, through q). complete is
// false when even that does not account for them (e is then unchanged).
func (e *convEntry) apply(ctx context.Context, q dbtx, br pgx.BatchResults, sessionID string) (complete bool, err error) {
	rows, err := br.Query()
	if err != nil {
		return false, fmt.Errorf("read conversation: %w", err)
	}
	var head int64
	found := false
	var fresh []cachedMsg
	for rows.Next() {
		var seq, dropped *int64
		var idem, role *string
		var content []byte
		if err := rows.Scan(&head, &seq, &idem, &role, &content, &dropped); err != nil {
			rows.Close()
			return false, fmt.Errorf("read conversation: %w", err)
		}
		found = true
		if seq == nil {
			continue // no message since: the counter alone
		}
		fresh = append(fresh, cachedMsg{seq: *seq, idem: *idem, role: *role, raw: content, dropped: *dropped})
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read conversation: %w", err)
	}
	if !found {
		return false, fmt.Errorf("read conversation: session %s: %w", sessionID, ErrNotFound)
	}
	// The counter and the rows come from one statement, one snapshot; a
	// row past the counter (none since they are read together) would wait
	// for the next refresh.
	for len(fresh) > 0 && fresh[len(fresh)-1].seq > head {
		fresh = fresh[:len(fresh)-1]
	}
	accounted := map[int64]bool{}
	// A removal that took a row appended since also accounts for its
	// counter value, but it may have taken cached rows too (a turn whose
	// first messages were read before its last was appended): then the
	// cached rows' removals are read as well.
	freshDrop := false
	for i := range fresh {
		accounted[fresh[i].seq] = true
		if fresh[i].dropped > head {
			fresh[i].dropped = 0
		}
		if d := fresh[i].dropped; d != 0 {
			accounted[d] = true
			freshDrop = true
		}
	}
	unaccounted := func() bool {
		for n := e.last + 1; n <= head; n++ {
			if !accounted[n] {
				return true
			}
		}
		return false
	}
	var drops []drop
	if e.last != 0 && (freshDrop || unaccounted()) { // the full history accounts for itself
		// Finish the batch before the next query on the connection.
		if err := br.Close(); err != nil {
			return false, fmt.Errorf("read conversation: %w", err)
		}
		dropped, err := e.droppedSince(ctx, q, sessionID)
		if err != nil {
			return false, err
		}
		for _, d := range dropped {
			if d.seq <= e.last && d.at <= head {
				drops = append(drops, d)
				accounted[d.at] = true
			}
		}
		if unaccounted() {
			return false, nil
		}
	}
	for _, d := range drops {
		if i, ok := e.find(d.seq); ok {
			e.msgs[i].dropped = d.at
		}
	}
	if err := e.add(fresh); err != nil {
		return false, err
	}
	e.noteDrops()
	e.last = head
	return true, nil
}

// find is the index of the cached message with seq.
func (e *convEntry) find(seq int64) (int, bool) {
	i := sort.Search(len(e.msgs), func(i int) bool { return e.msgs[i].seq >= seq })
	return i, i < len(e.msgs) && e.msgs[i].seq == seq
}

// noteDrops rebuilds the sorted list of removal counters.
func (e *convEntry) noteDrops() {
	seen := map[int64]bool{}
	e.drops = e.drops[:0]
	for _, m := range e.msgs {
		if m.dropped != 0 && !seen[m.dropped] {
			seen[m.dropped] = true
			e.drops = append(e.drops, m.dropped)
		}
	}
	sort.Slice(e.drops, func(i, j int) bool { return e.drops[i] < e.drops[j] })
}

// add appends freshly read messages, compacted as json.Marshal renders them.
func (e *convEntry) add(fresh []cachedMsg) error {
	for _, m := range fresh {
		var content bytes.Buffer
		if err := json.Compact(&content, m.raw); err != nil {
			return fmt.Errorf("read conversation: message %d: %w", m.seq, err)
		}
		role, _ := json.Marshal(m.role)
		if len(e.buf) > 0 {
			e.buf = append(e.buf, ',')
		}
		m.start = len(e.buf)
		e.buf = append(e.buf, `{"role":`...)
		e.buf = append(e.buf, role...)
		e.buf = append(e.buf, `,"content":`...)
		m.cstart = len(e.buf)
		e.buf = append(e.buf, content.Bytes()...)
		e.buf = append(e.buf, '}')
		m.end = len(e.buf)
		m.raw = nil
		e.msgs = append(e.msgs, m)
	}
	return nil
}

// appendArray appends the conversation as of counter n, a JSON array, to
// dst.
func (e *convEntry) appendArray(dst []byte, n int64) []byte {
	dst = append(dst, '[')
	for i, run := range e.runs(n) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, run...)
	}
	return append(dst, ']')
}

// runs are the encoded messages in the conversation as of counter n, as
// views of buf: one per stretch of messages not removed at or before n
// (without such a removal, one slice). Each view is capped, so appending
// to it never writes into buf.
func (e *convEntry) runs(n int64) [][]byte {
	k := sort.Search(len(e.msgs), func(i int) bool { return e.msgs[i].seq > n }) // messages [0,k) have seq <= n
	if k == 0 {
		return nil
	}
	if len(e.drops) == 0 || e.drops[0] > n {
		end := e.msgs[k-1].end
		return [][]byte{e.buf[:end:end]}
	}
	var out [][]byte
	runStart := -1
	flush := func(end int) {
		if runStart >= 0 {
			out = append(out, e.buf[runStart:end:end])
			runStart = -1
		}
	}
	for i := range k {
		m := e.msgs[i]
		if m.dropped != 0 && m.dropped <= n {
			if i > 0 {
				flush(e.msgs[i-1].end)
			}
			continue
		}
		if runStart < 0 {
			runStart = m.start
		}
	}
	flush(e.msgs[k-1].end)
	return out
}

// Conversation is the session's conversation as sent upstream: a JSON array
// of {"role","content"} messages in order, and the message counter it
// reflects (a provider.request names its conversation by it). Only what
// changed since this process last read the session is read.
func (s *Store) Conversation(ctx context.Context, sessionID string) (json.RawMessage, int64, error) {
	e := s.conv.entry(sessionID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refresh(ctx, s.Pool, sessionID); err != nil {
		s.conv.forget(sessionID)
		return nil, 0, err
	}
	s.conv.account(sessionID, e)
	return e.appendArray(make([]byte, 0, len(e.buf)+2), e.last), e.last, nil
}

// Attempt reads a provider attempt's inputs (AttemptInputs) and the
// conversation (as Store.Conversation) in one round trip.
func (t *Tx) Attempt(ctx context.Context, sessionID, clientKeyID, respIdem string) (AttemptInputs, json.RawMessage, int64, error) {
	var conv json.RawMessage
	var last int64
	in, err := t.attemptRead(ctx, sessionID, clientKeyID, respIdem, nil, nil, func(e *convEntry) {
		conv, last = e.appendArray(make([]byte, 0, len(e.buf)+2), e.last), e.last
	})
	if err != nil {
		return in, nil, 0, err
	}
	return in, conv, last, nil
}

// AttemptStreaming is Attempt for a call whose deltas stream: the same
// round trip numbers the call's run (as Store.StreamRun, committed with
// the transaction), so its first delta never waits for the database. Run
// is 0 when the turn has no stored input to number.
func (t *Tx) AttemptStreaming(ctx context.Context, sessionID, clientKeyID, respIdem, turnID, step string) (AttemptInputs, json.RawMessage, int64, StreamRunNo, error) {
	var conv json.RawMessage
	var last int64
	var run StreamRunNo
	in, err := t.attemptRead(ctx, sessionID, clientKeyID, respIdem,
		func(b *pgx.Batch) { t.queueStreamRun(b, turnID, step) },
		func(br pgx.BatchResults) (err error) {
			run, err = scanStreamRun(br.QueryRow(), turnID)
			if errors.Is(err, pgx.ErrNoRows) {
				// No turn input: the run is not numbered (Run 0) and sends no
				// deltas; the attempt goes on.
				return nil
			}
			return err
		},
		func(e *convEntry) {
			conv, last = e.appendArray(make([]byte, 0, len(e.buf)+2), e.last), e.last
		})
	if err != nil {
		return in, nil, 0, run, err
	}
	return in, conv, last, run, nil
}

// attemptRead sends an attempt's inputs query, the rows extra queues (read
// back by read, in the same order) and what the session's conversation
// lacks in one batch, then hands use the conversation entry, current and
// still locked. On any error the cached entry is forgotten.
func (t *Tx) attemptRead(ctx context.Context, sessionID, clientKeyID, respIdem string,
	extra func(*pgx.Batch), read func(pgx.BatchResults) error, use func(*convEntry)) (AttemptInputs, error) {
	s, tx := t.s, t.db
	e := s.conv.entry(sessionID)
	e.mu.Lock()
	defer e.mu.Unlock()
	b := &pgx.Batch{}
	queueAttemptInputs(b, sessionID, clientKeyID, respIdem)
	t.queueAttemptBudgets(b, sessionID)
	if extra != nil {
		extra(b)
	}
	e.queue(b, sessionID)
	br := tx.SendBatch(ctx, b)
	in, err := readAttemptInputs(br)
	if err == nil {
		err = t.readAttemptBudgets(br)
	}
	if err == nil && read != nil {
		err = read(br)
	}
	complete := false
	if err == nil {
		complete, err = e.apply(ctx, tx, br, sessionID)
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && !complete {
		e.last, e.msgs, e.buf, e.drops = 0, nil, nil, nil
		err = e.refresh(ctx, tx, sessionID)
	}
	if err != nil {
		s.conv.forget(sessionID)
		return in, err
	}
	s.conv.account(sessionID, e)
	use(e)
	return in, nil
}

// CachedMessage returns a message of the session by idempotency key from
// what this process already read, refreshing first when it is not there.
// It serves a turn reading a message it just stored: a message taken out of
// the conversation since is still found until the next refresh.
func (s *Store) CachedMessage(ctx context.Context, sessionID, idemKey string) (Message, error) {
	e := s.conv.entry(sessionID)
	e.mu.Lock()
	defer e.mu.Unlock()
	find := func() (Message, bool) {
		for i := len(e.msgs) - 1; i >= 0; i-- {
			if m := e.msgs[i]; m.idem == idemKey && m.dropped == 0 {
				content := append(json.RawMessage(nil), e.buf[m.cstart:m.end-1]...)
				return Message{Seq: m.seq, Role: m.role, Content: content}, true
			}
		}
		return Message{}, false
	}
	if m, ok := find(); ok {
		return m, nil
	}
	if err := e.refresh(ctx, s.Pool, sessionID); err != nil {
		s.conv.forget(sessionID)
		return Message{}, err
	}
	s.conv.account(sessionID, e)
	if m, ok := find(); ok {
		return m, nil
	}
	return Message{}, ErrNotFound
}

// materialize fills in the messages of provider.request events stored by
// reference, reading the conversation only when the cache is behind the
// newest reference, and the summaries compacted requests name only when
// the cache does not hold them.
func (s *Store) materialize(ctx context.Context, q dbtx, sessionID string, evs []Event) error {
	e, err := s.entryFor(ctx, q, sessionID, evs)
	if e == nil || err != nil {
		return err
	}
	defer e.mu.Unlock()
	for i := range evs {
		ev := &evs[i]
		if !ev.byRef {
			continue
		}
		stored := ev.Payload
		p := make([]byte, 0, len(stored)+e.arrayLen(ev.messagesAt)+16)
		p = append(p, `{"messages":`...)
		p = e.appendMessages(p, ev)
		if rest := bytes.TrimSpace(stored); len(rest) > 2 {
			p = append(p, ',')
			p = append(p, rest[1:]...)
		} else {
			p = append(p, '}')
		}
		ev.Payload, ev.byRef, ev.view = p, false, nil
	}
	return nil
}

// entryFor is the session's conversation entry, locked, current up to the
// newest reference among evs and holding the summaries their views name;
// nil (and unlocked) when no event is stored by reference.
func (s *Store) entryFor(ctx context.Context, q dbtx, sessionID string, evs []Event) (*convEntry, error) {
	var need int64 = -1
	for _, ev := range evs {
		if ev.byRef {
			need = max(need, ev.messagesAt)
		}
	}
	if need < 0 {
		return nil, nil
	}
	e := s.conv.entry(sessionID)
	e.mu.Lock()
	if e.last < need || len(e.msgs) == 0 && need > 0 {
		if err := e.refresh(ctx, q, sessionID); err != nil {
			e.mu.Unlock()
			s.conv.forget(sessionID)
			return nil, err
		}
		s.conv.account(sessionID, e)
	}
	if err := e.readSummaries(ctx, q, sessionID, evs); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	return e, nil
}

// readSummaries reads the summaries evs' views name that e does not hold,
// along the session's chain (a fork's requests may name its source's).
func (e *convEntry) readSummaries(ctx context.Context, q dbtx, sessionID string, evs []Event) error {
	var missing []string
	for _, ev := range evs {
		if v := ev.view; v != nil && v.SummaryID != "" && !slices.Contains(missing, v.SummaryID) {
			if _, ok := e.summaries[v.SummaryID]; !ok {
				missing = append(missing, v.SummaryID)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, `WITH RECURSIVE `+ancestorsCTE("$1", "forked_event_seq")+`
		SELECT id, summary FROM session_summaries
		WHERE id = ANY($2) AND (session_id = $1 OR session_id IN (SELECT id FROM chain))`, sessionID, missing)
	if err != nil {
		return fmt.Errorf("read summaries: %w", err)
	}
	for rows.Next() {
		var id, text string
		if err := rows.Scan(&id, &text); err != nil {
			rows.Close()
			return fmt.Errorf("read summaries: %w", err)
		}
		e.noteSummary(id, text)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read summaries: %w", err)
	}
	for _, id := range missing {
		if _, ok := e.summaries[id]; !ok {
			return fmt.Errorf("read summaries: summary %s of a stored request: %w", id, ErrNotFound)
		}
	}
	return nil
}

func (e *convEntry) noteSummary(id, text string) {
	if e.summaries == nil {
		e.summaries = map[string]string{}
	}
	e.summaries[id] = text
}

// appendMessages appends the messages of an event stored by reference to
// dst: the conversation as of its counter, or the view of it that was
// sent, rendered again as compaction.Render rendered it then.
func (e *convEntry) appendMessages(dst []byte, ev *Event) []byte {
	if ev.view == nil {
		return e.appendArray(dst, ev.messagesAt)
	}
	st := *ev.view
	st.Summary = e.summaries[st.SummaryID]
	return append(dst, compaction.Render(e.liveAt(ev.messagesAt, st.ThroughSeq), st)...)
}

// liveAt is the conversation as of counter n after message after, each
// content a view of buf (capped, so it is never written through).
func (e *convEntry) liveAt(n, after int64) []compaction.Message {
	i, _ := e.find(after + 1)
	var out []compaction.Message
	for _, m := range e.msgs[i:] {
		if m.seq > n {
			break
		}
		if m.dropped != 0 && m.dropped <= n {
			continue
		}
		end := m.end - 1
		out = append(out, compaction.Message{Seq: m.seq, Idem: m.idem, Role: m.role, Content: json.RawMessage(e.buf[m.cstart:end:end])})
	}
	return out
}

// arrayLen is about the size of the conversation as of n, for allocation.
func (e *convEntry) arrayLen(n int64) int {
	k := sort.Search(len(e.msgs), func(i int) bool { return e.msgs[i].seq > n })
	if k == 0 {
		return 2
	}
	return e.msgs[k-1].end + 2
}

// EncodedEvent is an event ready to be written: its EventView JSON in
// pieces. A provider.request's conversation is a view of the cache's
// encoded messages, not a copy; the pieces stay valid after the call.
type EncodedEvent struct {
	Seq   int64
	Type  events.Type
	Parts [][]byte
}

// Size is the encoded length.
func (e EncodedEvent) Size() int {
	n := 0
	for _, p := range e.Parts {
		n += len(p)
	}
	return n
}

// EncodedEventsPage is ListEvents, encoded: up to limit events after a
// sequence, stopping before maxBytes of encoded events (always at least
// one), and the cursor of the next page (nil at the end). Payloads past
// the byte bound by their stored size are not even read.
func (s *Store) EncodedEventsPage(ctx context.Context, sessionID string, after int64, limit, maxBytes int) ([]EncodedEvent, *string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+strings.Replace(eventCols, " payload,", ` CASE WHEN fits THEN payload ELSE '{}'::json END,`, 1)+`, fits
		FROM (SELECT *, row_number() OVER w = 1 OR sum(octet_length(payload::text)) OVER w <= $4 AS fits
		      FROM `+eventLog("$1", "e.seq > $2", "ORDER BY e.seq LIMIT $3")+` e
		      WINDOW w AS (ORDER BY seq) ORDER BY seq LIMIT $3) e
		ORDER BY seq`, sessionID, after, limit+1, maxBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("read events: %w", err)
	}
	var list []Event
	more := false
	for rows.Next() {
		var fits bool
		e, err := scanEventAnd(rows, &fits)
		if err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("read events: %w", err)
		}
		if !fits || len(list) == limit {
			more = true
			break
		}
		list = append(list, e)
	}
	rows.Close()
	markInherited(sessionID, list)
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read events: %w", err)
	}
	out, err := s.encode(ctx, sessionID, list)
	if err != nil {
		return nil, nil, err
	}
	// A provider.request's conversation is not in its stored payload:
	// bound the encoded page too.
	total := 0
	for i, e := range out {
		if total += e.Size(); i > 0 && total > maxBytes {
			out, more = out[:i], true
			break
		}
	}
	if !more {
		return out, nil, nil
	}
	c := strconv.FormatInt(out[len(out)-1].Seq, 10)
	return out, &c, nil
}

// encode renders events as EncodedEvents, reading the conversation only
// when the cache is behind the newest reference.
func (s *Store) encode(ctx context.Context, sessionID string, evs []Event) ([]EncodedEvent, error) {
	out := make([]EncodedEvent, len(evs))
	for i, ev := range evs {
		if !ev.byRef {
			out[i] = EncodedEvent{Seq: ev.Seq, Type: ev.Type, Parts: [][]byte{ev.AppendJSON(nil)}}
		}
	}
	e, err := s.entryFor(ctx, s.Pool, sessionID, evs)
	if e == nil || err != nil {
		return out, err
	}
	defer e.mu.Unlock()
	for i, ev := range evs {
		if !ev.byRef {
			continue
		}
		// Everything up to the payload, the conversation, then the rest of
		// the stored payload and the fields after it.
		stored := bytes.TrimSpace(ev.Payload)
		ev.Payload = json.RawMessage(`{}`)
		full := ev.AppendJSON(nil)
		cut := bytes.LastIndex(full, []byte(`,"created_at":`))
		head := append(full[:cut-len(`{}`):cut-len(`{}`)], `{"messages":`...)
		parts := [][]byte{head}
		if ev.view != nil {
			// A view is rendered: its own copy.
			parts = append(parts, e.appendMessages(nil, &ev))
		} else {
			parts = e.appendArrayParts(parts, ev.messagesAt)
		}
		var rest []byte
		if len(stored) > 2 {
			rest = append(rest, ',')
			rest = append(rest, stored[1:]...)
		} else {
			rest = append(rest, '}')
		}
		rest = append(rest, full[cut:]...)
		out[i] = EncodedEvent{Seq: ev.Seq, Type: ev.Type, Parts: append(parts, rest)}
	}
	return out, nil
}

// appendArrayParts is appendArray as views of buf.
func (e *convEntry) appendArrayParts(parts [][]byte, n int64) [][]byte {
	parts = append(parts, []byte{'['})
	for i, run := range e.runs(n) {
		if i > 0 {
			parts = append(parts, []byte{','})
		}
		parts = append(parts, run)
	}
	return append(parts, []byte{']'})
}
