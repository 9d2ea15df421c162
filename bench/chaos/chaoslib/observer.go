package chaoslib

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// observer watches a session with session.subscribe and live deltas
// opted in, as a UI would: every so often it drops its stream and resumes
// on whichever replica the balancer picks, from the last event it saw
// (since_event_id) and the last delta (Bae-Deltas: after=turn:seq). A slow
// observer (the slow-client fault) stops reading for a while.
type observer struct {
	n    int
	s    *chaosSession
	key  string
	run  *run
	hc   *http.Client
	mu   sync.Mutex
	seen []seenEvent
	// resumes counts reconnects that asked for deltas after a seq;
	// resets the reset deltas those got.
	resumes, resets int
	// ends counts streams that ended early, by reason.
	ends      map[string]int
	slowUntil time.Time
	lastTurn  string
	lastSeq   int64
	lastEvent string
}

// seenEvent is one event as an observer received it.
type seenEvent struct {
	ID, Type string
	At       time.Time
}

func (o *observer) snapshot() []seenEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]seenEvent(nil), o.seen...)
}

// stall makes the observer stop reading for d.
func (o *observer) stall(d time.Duration) {
	o.mu.Lock()
	o.slowUntil = time.Now().Add(d)
	o.mu.Unlock()
}

// loop observes until stop; each stream lasts a random 5-40 s.
func (o *observer) loop(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+o.run.rand(35))*time.Second)
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := o.stream(ctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			o.mu.Lock()
			if o.ends == nil {
				o.ends = map[string]int{}
			}
			o.ends[endReason(err)]++
			o.mu.Unlock()
		}
		// Never a tight loop: a stream the server ends at once is
		// reopened after a pause.
		time.Sleep(500 * time.Millisecond)
	}
}

func (o *observer) stream(ctx context.Context) error {
	o.mu.Lock()
	since, turn, seq := o.lastEvent, o.lastTurn, o.lastSeq
	o.mu.Unlock()
	params := map[string]any{}
	if since != "" {
		params["since_event_id"] = since
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": params})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://lb/api/v1/sessions/"+o.s.id+"/rpc", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+o.key)
	req.Header.Set("Content-Type", "application/json")
	if turn != "" {
		req.Header.Set("Bae-Deltas", fmt.Sprintf("after=%s:%d", turn, seq))
		o.mu.Lock()
		o.resumes++
		o.mu.Unlock()
	} else {
		req.Header.Set("Bae-Deltas", "on")
	}
	resp, err := o.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Errorf("subscribe: %s", resp.Status)
	}
	rd := bufio.NewReaderSize(resp.Body, 4096)
	for {
		o.mu.Lock()
		until := o.slowUntil
		o.mu.Unlock()
		if d := time.Until(until); d > 0 {
			// A client that stops reading: the server's buffers fill.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		line, err := rd.ReadBytes('\n')
		if err != nil {
			return err
		}
		var f struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(line, &f) != nil {
			continue
		}
		switch f.Method {
		case "session.event":
			var e struct {
				ID   string `json:"id"`
				Type string `json:"type"`
			}
			_ = json.Unmarshal(f.Params, &e)
			o.mu.Lock()
			o.seen = append(o.seen, seenEvent{ID: e.ID, Type: e.Type, At: time.Now()})
			o.lastEvent = e.ID
			o.mu.Unlock()
			if e.Type == "session.close" {
				return nil
			}
		case "session.delta":
			var d struct {
				TurnID string `json:"turn_id"`
				Seq    int64  `json:"seq"`
				Type   string `json:"type"`
			}
			_ = json.Unmarshal(f.Params, &d)
			o.mu.Lock()
			if d.Type == "reset" {
				o.resets++
			}
			if d.TurnID != "" && d.Seq > 0 {
				o.lastTurn, o.lastSeq = d.TurnID, d.Seq
			}
			o.mu.Unlock()
		}
		if len(bytes.TrimSpace(f.ID)) > 0 && string(bytes.TrimSpace(f.ID)) != "null" {
			var t struct {
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(line, &t) == nil && t.Error != nil {
				return fmt.Errorf("terminal error: %s", t.Error.Message)
			}
			return errors.New("terminal result")
		}
		if f.Method == "" {
			var t struct {
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(line, &t) == nil && t.Error != nil {
				return fmt.Errorf("error notification: %s", t.Error.Message)
			}
		}
	}
}

// endReason shortens a stream's end for the report.
func endReason(err error) string {
	s := err.Error()
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}
