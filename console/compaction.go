package console

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// The transcript shows where a session.compaction happened and what it
// did: the summary that stands for the oldest turns from then on, or the
// tool results whose content providers no longer see. The log keeps every
// event, so a boundary expands to the original events it covers (fetched
// from /sessions/{id}/events, not redrawn with every change).

// compactionView is one session.compaction, as the transcript draws it.
type compactionView struct {
	Seq                       int64
	ID                        string
	Layer                     string
	Trigger                   string
	Provider                  string
	From, Through             int64 // the events covered
	TokensBefore, TokensAfter int
	Budget                    int
	Summary                   string
	Summarizer                *events.SummarizerUsage
	Cleared                   []clearedResult
	Fallback                  string
}

// clearedResult is a tool result whose content was cleared.
type clearedResult struct{ ID, Name string }

// Summarized reports the summary layer.
func (c *compactionView) Summarized() bool { return c.Layer == events.LayerSummary }

// Headline is the boundary's one-line description.
func (c *compactionView) Headline() string {
	if c.Summarized() {
		return "Context compacted: earlier turns summarized"
	}
	return fmt.Sprintf("Context compacted: %d tool result(s) cleared", len(c.Cleared))
}

func compactionOf(e store.Event, calls map[string]*toolView) *compactionView {
	var p events.CompactionPayload
	_ = json.Unmarshal(e.Payload, &p)
	v := &compactionView{
		Seq: e.Seq, ID: p.CompactionID, Layer: p.Layer, Trigger: p.Trigger, Provider: p.Provider,
		From: p.Events.From, Through: p.Events.Through,
		TokensBefore: p.TokensBefore, TokensAfter: p.TokensAfter, Budget: p.Budget,
		Summary: truncate(p.Summary, maxShown), Summarizer: p.Summarizer, Fallback: p.Fallback,
	}
	for _, id := range p.ClearedToolResults {
		name := ""
		if tv := calls[id]; tv != nil {
			name = tv.Name
		}
		v.Cleared = append(v.Cleared, clearedResult{ID: id, Name: name})
	}
	return v
}

// markCompacted labels the turns each compaction covers; a summary wins
// over cleared results.
func markCompacted(items []transcriptItem) {
	var comps []*compactionView
	for _, it := range items {
		if it.Turn == nil {
			continue
		}
		for _, en := range it.Turn.Entries {
			if en.Compaction != nil {
				comps = append(comps, en.Compaction)
			}
		}
	}
	for _, c := range comps {
		for _, it := range items {
			t := it.Turn
			if t == nil || t.FirstSeq < c.From || t.FirstSeq > c.Through || t.Compacted == "summarized" {
				continue
			}
			if c.Summarized() {
				t.Compacted = "summarized"
			} else {
				t.Compacted = "tool results cleared"
			}
		}
	}
}

// maxOriginals bounds the original events one expansion draws.
const maxOriginals = 1000

// compactionOriginals draws the events from..through of a session as a
// transcript, for a compaction boundary's expansion: an HTML fragment,
// escaped like the page it goes into.
func (c *Console) compactionOriginals(w http.ResponseWriter, r *http.Request) {
	sess, ok := c.session(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	through, err2 := strconv.ParseInt(q.Get("through"), 10, 64)
	if err1 != nil || err2 != nil || from < 1 || through < from {
		http.Error(w, "from and through must be event sequence numbers, from ≤ through", http.StatusBadRequest)
		return
	}
	var evs []store.Event
	after := from - 1
	for len(evs) < maxOriginals {
		batch, err := c.o.Store.EventsAfter(r.Context(), sess.ID, after, min(500, maxOriginals-len(evs)))
		if err != nil {
			c.internal(w, r, err)
			return
		}
		for _, e := range batch {
			if e.Seq <= through {
				evs = append(evs, e)
			}
		}
		if len(batch) < 500 || batch[len(batch)-1].Seq >= through {
			break
		}
		after = batch[len(batch)-1].Seq
	}
	v := sessionView{Session: sess, Items: buildTranscript(evs), Originals: true, Truncated: len(evs) >= maxOriginals && evs[len(evs)-1].Seq < through}
	html, err := c.fragment("originals", v)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, html)
}
