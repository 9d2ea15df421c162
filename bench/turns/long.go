package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/bench/benchstack"
)

// longReport is the long-session mode (-long): one session built up to a
// number of events, then per-turn cost on it against a fresh session's in
// the same run, and its replay.
type longReport struct {
	Events     int64   `json:"events"`
	BuildTurns int     `json:"build_turns"`
	BuildS     float64 `json:"build_s"`
	// BuildAddedFirst/Last are the server-added p50 of the first and last
	// tenth of the building turns.
	BuildAddedFirst float64 `json:"build_server_added_p50_first_tenth_ms"`
	BuildAddedLast  float64 `json:"build_server_added_p50_last_tenth_ms"`
	BuildErrors     int     `json:"build_errors"`

	Fresh longPhase `json:"fresh_session"`
	Long  longPhase `json:"long_session"`

	// Replay through session.subscribe with since_event_id, and through
	// GET /events pages, of the whole log.
	ReplayEvents  int     `json:"replay_events"`
	ReplayS       float64 `json:"subscribe_replay_s"`
	ReplayBytes   int64   `json:"subscribe_replay_bytes"`
	PagesS        float64 `json:"get_events_s"`
	Pages         int     `json:"get_events_pages"`
	PagesBytes    int64   `json:"get_events_bytes"`
	EventsBytes   int64   `json:"session_events_payload_bytes"`
	MessagesBytes int64   `json:"session_messages_bytes"`
	RequestBytes  int64   `json:"provider_request_payload_bytes"`
	Err           string  `json:"error,omitempty"`
}

// longPhase is per-turn cost on one session.
type longPhase struct {
	Turns       int             `json:"turns"`
	Errors      int             `json:"errors"`
	ServerAdded benchstack.Dist `json:"server_added_latency"`
	CPUMsTurn   float64         `json:"process_cpu_ms_per_turn"`
	// FakeMsTurn is the fake provider's handler time: it runs in this
	// process and parses the provider body, so its CPU is in CPUMsTurn.
	FakeMsTurn  float64 `json:"fake_ms_per_turn"`
	PGMsTurn    float64 `json:"postgres_cpu_ms_per_turn"`
	StreamBytes float64 `json:"stream_bytes_per_turn"`
	ProviderKiB float64 `json:"provider_body_kib_per_turn"`
}

// runLong builds a session of at least o.long events, then measures turns
// on it and on a fresh session alternately in blocks (fresh, long, fresh,
// long, ...) so drift in the machine's load falls on both, and replays it.
func runLong(ctx context.Context, log *slog.Logger, a *api, st *stack, pg *pgSampler, clientKey string, o options) *longReport {
	rep := &longReport{}
	long, err := a.open(ctx, clientKey)
	if err != nil {
		rep.Err = err.Error()
		return rep
	}
	t0 := time.Now()
	var added []time.Duration
	log.Info("building the long session", "events", o.long)
	for n := 0; ctx.Err() == nil; n++ {
		events, err := eventCount(ctx, st.DBURL, long.ID)
		if err != nil {
			rep.Err = err.Error()
			return rep
		}
		if events >= int64(o.long) {
			rep.Events = events
			break
		}
		// Check the count every 100 turns only (4 events per text turn).
		for range min(100, max(1, int(int64(o.long)-events)/4)) {
			tok := fmt.Sprintf("long %d", rep.BuildTurns)
			start := time.Now()
			_, err := a.turn(ctx, long, tok, o.turnTimeout)
			lat := time.Since(start)
			ft, ok := st.Fake.take(tok)
			rep.BuildTurns++
			if err != nil {
				rep.BuildErrors++
				log.Warn("long session turn failed", "err", err)
				continue
			}
			if ok {
				added = append(added, lat-ft.Total)
			}
		}
		if rep.BuildTurns%500 < 100 {
			log.Info("long session", "turns", rep.BuildTurns, "elapsed", time.Since(t0).Round(time.Second))
		}
	}
	rep.BuildS = time.Since(t0).Seconds()
	if tenth := len(added) / 10; tenth > 0 {
		rep.BuildAddedFirst = benchstack.Summarise(added[:tenth]).P50
		rep.BuildAddedLast = benchstack.Summarise(added[len(added)-tenth:]).P50
	}
	if ctx.Err() != nil {
		return rep
	}

	fresh, err := a.open(ctx, clientKey)
	if err != nil {
		rep.Err = err.Error()
		return rep
	}
	// Warm the fresh session (its first turn starts its workflow).
	_, _ = a.turn(ctx, fresh, "fresh warmup", o.turnTimeout)
	const block = 10
	var fr, lr phaseAcc
	for i := 0; i < max(o.turns, block) && ctx.Err() == nil; i += block {
		fr.run(ctx, a, st, pg, fresh, fmt.Sprintf("fresh %d", i), block, o.turnTimeout)
		lr.run(ctx, a, st, pg, long, fmt.Sprintf("measured %d", i), block, o.turnTimeout)
	}
	rep.Fresh, rep.Long = fr.phase(), lr.phase()
	if o.cpuProfile != "" {
		// A profile of the long session's turns alone, for what grows.
		if err := profileTurns(ctx, a, long, o, block); err != nil {
			log.Warn("cpu profile of the long session", "err", err)
		}
	}

	// Replays of the whole log.
	rep.ReplayEvents, rep.ReplayBytes, rep.ReplayS, err = replay(ctx, a, long)
	if err != nil {
		rep.Err = err.Error()
	}
	rep.Pages, rep.PagesBytes, rep.PagesS, err = readPages(ctx, a, long)
	if err != nil && rep.Err == "" {
		rep.Err = err.Error()
	}
	if err := longStorage(ctx, st.DBURL, long.ID, rep); err != nil && rep.Err == "" {
		rep.Err = err.Error()
	}
	return rep
}

// phaseAcc accumulates blocks of turns on one session.
type phaseAcc struct {
	added        []time.Duration
	errors       int
	cpu, pgCPU   time.Duration
	stream, body int64
	fake         time.Duration
}

func (p *phaseAcc) run(ctx context.Context, a *api, st *stack, pg *pgSampler, s *session, prefix string, n int, timeout time.Duration) {
	pids := pg.backendPIDs(ctx)
	c0, pg0 := selfCPU(), pidsCPU(pids)
	for i := range n {
		tok := fmt.Sprintf("%s/%d", prefix, i)
		start := time.Now()
		res, err := a.turn(ctx, s, tok, timeout)
		lat := time.Since(start)
		ft, ok := st.Fake.take(tok)
		if err != nil {
			p.errors++
			continue
		}
		p.stream += res.Bytes
		if ok {
			p.added = append(p.added, lat-ft.Total)
			p.body += ft.Bytes
			p.fake += ft.Total
		}
	}
	p.cpu += selfCPU() - c0
	p.pgCPU += pidsCPU(pids) - pg0
}

func (p *phaseAcc) phase() longPhase {
	n := len(p.added)
	ph := longPhase{Turns: n, Errors: p.errors, ServerAdded: benchstack.Summarise(p.added)}
	if n > 0 {
		ph.CPUMsTurn = benchstack.Ms(p.cpu) / float64(n)
		ph.FakeMsTurn = benchstack.Ms(p.fake) / float64(n)
		ph.PGMsTurn = benchstack.Ms(p.pgCPU) / float64(n)
		ph.StreamBytes = float64(p.stream) / float64(n)
		ph.ProviderKiB = float64(p.body) / 1024 / float64(n)
	}
	return ph
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pidsCPU(pids []int) time.Duration {
	var d time.Duration
	for _, pid := range pids {
		if c, ok := procCPU(pid); ok {
			d += c
		}
	}
	return d
}

func eventCount(ctx context.Context, dbURL, sessionID string) (int64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT last_event_seq FROM sessions WHERE id = $1`, sessionID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return n, nil
}

// replay subscribes with an unknown since_event_id, which replays the whole
// log, and times it to the last event. Lines are counted, not decoded, so
// the figure is the server's.
func replay(ctx context.Context, a *api, s *session) (int, int64, float64, error) {
	total, err := countEvents(ctx, a, s)
	if err != nil {
		return 0, 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": map[string]any{"since_event_id": "evt_none"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.clientURL+"/api/v1/sessions/"+s.ID+"/rpc", bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.Key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("replay: %w", err)
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	lines, size := 0, int64(0)
	buf := make([]byte, 1<<20)
	for lines < total {
		n, err := r.Read(buf)
		lines += bytes.Count(buf[:n], []byte{'\n'})
		size += int64(n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return lines, size, time.Since(start).Seconds(), fmt.Errorf("replay after %d of %d events: %w", lines, total, err)
		}
	}
	return lines, size, time.Since(start).Seconds(), nil
}

// countEvents reads the log's size from the first page's cursor walk.
func countEvents(ctx context.Context, a *api, s *session) (int, error) {
	pages, _, _, err := readPagesCount(ctx, a, s, true)
	return pages, err
}

func readPages(ctx context.Context, a *api, s *session) (int, int64, float64, error) {
	return readPagesCount(ctx, a, s, false)
}

// readPagesCount walks GET /events; with count it returns the number of
// events instead of pages.
func readPagesCount(ctx context.Context, a *api, s *session, count bool) (int, int64, float64, error) {
	start := time.Now()
	cursor := ""
	pages, events := 0, 0
	var size int64
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.clientURL+"/api/v1/sessions/"+s.ID+"/events?limit=200&cursor="+cursor, nil)
		if err != nil {
			return 0, 0, 0, err
		}
		req.Header.Set("Authorization", "Bearer "+s.Key)
		resp, err := a.http.Do(req)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("GET /events: %w", err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return 0, 0, 0, fmt.Errorf("GET /events: status %d: %v", resp.StatusCode, err)
		}
		size += int64(len(raw))
		pages++
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return 0, 0, 0, fmt.Errorf("GET /events: %w", err)
		}
		events += len(page.Items)
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if count {
		return events, size, time.Since(start).Seconds(), nil
	}
	return pages, size, time.Since(start).Seconds(), nil
}

func longStorage(ctx context.Context, dbURL, sessionID string, rep *longReport) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(octet_length(payload::text)), 0) FROM session_events WHERE session_id = $1),
		(SELECT coalesce(sum(octet_length(payload::text)), 0) FROM session_events WHERE session_id = $1 AND event_type = 'provider.request'),
		(SELECT coalesce(sum(octet_length(content::text)), 0) FROM session_messages WHERE session_id = $1)`, sessionID).
		Scan(&rep.EventsBytes, &rep.RequestBytes, &rep.MessagesBytes)
}

// profileTurns writes a CPU profile of n turns on s to o.cpuProfile.
func profileTurns(ctx context.Context, a *api, s *session, o options, n int) error {
	f, err := os.Create(o.cpuProfile)
	if err != nil {
		return fmt.Errorf("create cpu profile: %w", err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("start cpu profile: %w", err)
	}
	defer pprof.StopCPUProfile()
	for i := range n {
		if _, err := a.turn(ctx, s, fmt.Sprintf("profiled %d", i), o.turnTimeout); err != nil {
			return err
		}
	}
	return nil
}
