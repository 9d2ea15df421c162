package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/store"
)

// floorServer does the irreducible work of a text turn, and nothing else,
// against the same PostgreSQL and the same fake provider as bae-go: read
// the session row, append the turn's four events (client.message.send,
// provider.request, provider.response, server.message.send) with a
// per-session sequence, one commit each, and make one provider call. It
// speaks just enough of the wire API (the sendMessage NDJSON stream) for
// the bench's own client to drive it, so both are measured the same way.
//
// It has no orchestration, no durability beyond the event log and no
// authentication: it is the baseline bae-go's cost is compared with, on a
// database of its own (the real schema) so its PostgreSQL counters are its
// own.
type floorServer struct {
	pool     *pgxpool.Pool
	store    *store.Store
	dbName   string
	baseURL  string
	fakeURL  string
	provider *provider.Client
	srv      *http.Server
	URL      string

	mu   sync.Mutex
	conv map[string][]store.Message // the conversation, in memory
}

func startFloor(ctx context.Context, baseDBURL, fakeURL string) (_ *floorServer, err error) {
	f := &floorServer{baseURL: baseDBURL, fakeURL: fakeURL, conv: map[string][]store.Message{},
		provider: &provider.Client{HTTP: provider.NewHTTPClient()}}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	u, err := url.Parse(baseDBURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	f.dbName = "bae_floor_" + ids.New("")[:16]
	u.Path = "/" + f.dbName
	// store.Open creates the database and applies bae-go's migrations, so
	// the floor writes the same tables with the same indexes.
	st, err := store.Open(ctx, u.String(), store.Options{MaxConns: 20})
	if err != nil {
		return nil, fmt.Errorf("floor database: %w", err)
	}
	f.pool, f.store = st.Pool, st
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for floor: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/sessions/{id}/rpc", f.turn)
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on Close
	f.URL = "http://" + ln.Addr().String()
	return f, nil
}

// open creates n session rows.
func (f *floorServer) open(ctx context.Context, n int) ([]*session, error) {
	out := make([]*session, n)
	for i := range out {
		id := ids.New(ids.SessionPrefix)
		if _, err := f.pool.Exec(ctx, `INSERT INTO sessions (id, profile_id, client_key_id, state) VALUES ($1, 'pro_floor', 'key_floor', 'open')`, id); err != nil {
			return nil, fmt.Errorf("floor: open session: %w", err)
		}
		out[i] = &session{ID: id, Key: "floor"}
	}
	return out, nil
}

// Close stops the server and drops the floor's database.
func (f *floorServer) Close() {
	if f.srv != nil {
		_ = f.srv.Close()
	}
	if f.pool != nil {
		f.pool.Close()
	}
	if f.dbName == "" {
		return
	}
	db := benchstack.Database{BaseURL: f.baseURL, Name: f.dbName}
	_ = db.Drop()
}

type floorEvent struct {
	ID          string          `json:"id"`
	SessionID   string          `json:"session_id"`
	ClientKeyID string          `json:"client_key_id"`
	EventType   string          `json:"event_type"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   string          `json:"created_at"`
}

// appendEvent is one commit: allocate the session's next sequence number
// and insert the event in a single statement.
func (f *floorServer) appendEvent(ctx context.Context, sid, turn, typ string, payload any) (floorEvent, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return floorEvent{}, err
	}
	e := floorEvent{ID: ids.New(ids.EventPrefix), SessionID: sid, ClientKeyID: "key_floor", EventType: typ, Payload: b}
	var at time.Time
	err = f.pool.QueryRow(ctx, `WITH s AS (UPDATE sessions SET last_event_seq = last_event_seq + 1 WHERE id = $1 RETURNING last_event_seq)
		INSERT INTO session_events (session_id, seq, id, turn_id, client_key_id, event_type, payload)
		SELECT $1, s.last_event_seq, $2, $3, 'key_floor', $4, $5 FROM s RETURNING created_at`, sid, e.ID, turn, typ, string(b)).Scan(&at)
	if err != nil {
		return floorEvent{}, fmt.Errorf("append %s: %w", typ, err)
	}
	e.CreatedAt = store.FormatTime(at)
	return e, nil
}

func (f *floorServer) turn(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sid := r.PathValue("id")
	var req struct {
		ID     json.RawMessage `json:"id"`
		Params struct {
			Message struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"message"`
		} `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out := &ndjsonOut{w: w}
	fail := func(err error) {
		out.write(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32603, "message": err.Error()}})
	}
	var state string
	if err := f.pool.QueryRow(ctx, `SELECT state FROM sessions WHERE id = $1`, sid).Scan(&state); err != nil {
		fail(err)
		return
	}
	if state != "open" {
		fail(errors.New("session is not open"))
		return
	}
	turn := ids.New(ids.TurnPrefix)
	msg := req.Params.Message
	cms, err := f.appendEvent(ctx, sid, turn, "client.message.send", map[string]any{"role": "user", "content": msg.Content})
	if err != nil {
		fail(err)
		return
	}
	f.mu.Lock()
	history := append(f.conv[sid], store.Message{Role: "user", Content: msg.Content})
	f.mu.Unlock()
	messages, _ := json.Marshal(history)
	reqEv, err := f.appendEvent(ctx, sid, turn, "provider.request", map[string]any{
		"attempt": 0, "kind": "primary", "provider": "anthropic", "base_url": f.fakeURL, "model": "fake-model",
		"max_tokens": 4096, "messages": json.RawMessage(messages), "tools": json.RawMessage(`[]`),
	})
	if err != nil {
		fail(err)
		return
	}
	out.event(reqEv)
	resp, err := f.provider.Call(ctx, provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: f.fakeURL, Model: "fake-model", AuthToken: "not-a-secret"},
		messages, json.RawMessage(`[]`))
	if err != nil {
		fail(err)
		return
	}
	respEv, err := f.appendEvent(ctx, sid, turn, "provider.response", map[string]any{
		"attempt": 0, "kind": "primary", "provider": "anthropic", "ok": true, "status": resp.Status, "body": resp.Raw})
	if err != nil {
		fail(err)
		return
	}
	out.event(respEv)
	answer := map[string]any{"role": "assistant", "content": resp.Canonical.Content}
	sms, err := f.appendEvent(ctx, sid, turn, "server.message.send", answer)
	if err != nil {
		fail(err)
		return
	}
	out.event(sms)
	f.mu.Lock()
	f.conv[sid] = append(history, store.Message{Role: "assistant", Content: resp.Canonical.Content})
	f.mu.Unlock()
	out.write(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
		"message": answer, "events": []floorEvent{cms, reqEv, respEv, sms}}})
}

type ndjsonOut struct {
	w http.ResponseWriter
}

func (o *ndjsonOut) event(e floorEvent) {
	o.write(map[string]any{"jsonrpc": "2.0", "method": "session.event", "params": e})
}

func (o *ndjsonOut) write(v any) {
	b, _ := json.Marshal(v)
	_, _ = o.w.Write(append(b, '\n'))
	if fl, ok := o.w.(http.Flusher); ok {
		fl.Flush()
	}
}

// dbOf is the database name of a connection URL.
func dbOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(p.Path, "/")
}

// floorReport is the floor's run, with the same load as bae-go's.
type floorReport struct {
	Completed   int             `json:"completed"`
	Errors      int             `json:"errors"`
	FirstError  string          `json:"first_error,omitempty"`
	Elapsed     float64         `json:"elapsed_s"`
	PerSecond   float64         `json:"turns_per_s"`
	SendRate    float64         `json:"send_rate_per_s"`
	Client      benchstack.Dist `json:"client_latency"`
	ServerAdded benchstack.Dist `json:"server_added_latency"`
	PGWork      PGWork          `json:"postgres_work"`
	CPU         CPUStats        `json:"cpu"`
	Database    string          `json:"database"`
	// Temporal is the Temporal round trip alone with the same load.
	Temporal *temporalAlone `json:"temporal_alone,omitempty"`
	// added are the server-added latencies ServerAdded summarises (-rounds pools them).
	added []time.Duration
}

// runFloor drives the floor with bae-go's sessions, warm-up, turns and
// rate, on its own database, after bae-go's measured phase (so the two
// never share the machine).
func runFloor(ctx context.Context, log *slog.Logger, o options, st *stack) (*floorReport, error) {
	f, err := startFloor(ctx, o.dbURL, st.FakeURL)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sessions, err := f.open(ctx, o.sessions)
	if err != nil {
		return nil, err
	}
	a := newAPI(f.URL, "", "", o.sessions)
	defer a.close()
	for w := range o.warmup {
		for i, s := range sessions {
			if _, err := a.turn(ctx, s, fmt.Sprintf("floor warmup %d/%d", i, w), o.turnTimeout); err != nil {
				return nil, fmt.Errorf("floor warm-up: %w", err)
			}
		}
	}
	pg, err := newPGSampler(ctx, o.dbURL, f.pool.Config().ConnString())
	if err != nil {
		return nil, err
	}
	defer pg.close(context.Background())
	log.Info("measuring the floor", "sessions", len(sessions), "turns_per_session", o.turns, "duration", o.duration, "database", f.dbName)
	res, err := counted(ctx, pg, st.procs, f.store.DBCalls, func(h *driveHooks) []turnRec { return drive(ctx, log, a, st.Fake, sessions, o, h) })
	fr := &floorReport{Elapsed: res.elapsed.Seconds(), PGWork: res.work, CPU: res.cpu, Database: f.dbName}
	var client, added []time.Duration
	var starts []time.Time
	for _, r := range res.recs {
		if r.err != nil {
			fr.Errors++
			if fr.FirstError == "" {
				fr.FirstError = r.err.Error()
			}
			continue
		}
		fr.Completed++
		client = append(client, r.lat)
		starts = append(starts, r.start)
		if r.fakeOK {
			added = append(added, r.lat-r.fake.Total)
		}
	}
	fr.Client, fr.ServerAdded, fr.added = benchstack.Summarise(client), benchstack.Summarise(added), added
	if fr.Elapsed > 0 {
		fr.PerSecond = float64(fr.Completed) / fr.Elapsed
	}
	fr.SendRate = sendRate(starts)
	return fr, err
}

// sendRate is turns started per second between the first and last start.
func sendRate(starts []time.Time) float64 {
	if len(starts) < 2 {
		return 0
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	span := starts[len(starts)-1].Sub(starts[0]).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(len(starts)-1) / span
}
