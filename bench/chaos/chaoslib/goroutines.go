package chaoslib

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// What a replica's goroutines serve, as budgets the growth check takes off
// before judging (unexplained): each open client request (a sendMessage or
// subscribe stream holds its handler, relay and writer), each session with
// MCP connections on the replica (a stdio server's pipes and process, an
// HTTP server's stream), each workflow the worker keeps loaded (its
// coroutines, 2 each: docs/benchmarks.md, approvals). They are bounded by
// the clients and the sessions, not by time; the goroutines they do not
// explain are what may leak. The first two are a fit of a 25-minute
// campaign's replicas (goroutines against established client connections
// and bae_mcp_sessions_live, 439 scrapes): 122 + 3.8 per connection + 5.2
// per MCP session, residuals within ±225.
const (
	goroutinesPerRequest    = 4
	goroutinesPerMCPSession = 5
	goroutinesPerWorkflow   = 2
)

// unexplained is s's goroutines less the load's budgets.
func unexplained(s sample) float64 {
	return s.Goroutines - goroutinesPerRequest*s.Requests - goroutinesPerMCPSession*s.MCPSessions - goroutinesPerWorkflow*s.Workflows
}

// grows is the growth check's rule: late more than twice early plus 200
// (early taken as 0 when the budgets explain more than all of it).
func grows(early, late float64) bool { return late > 2*max(early, 0)+200 }

// goroutineGroup is the goroutines started at one site, waiting at one
// frame, in one goroutine profile.
type goroutineGroup struct {
	CreatedBy, WaitingIn string
}

// goroutineProfile is a replica's goroutines counted by group.
type goroutineProfile struct {
	At     time.Time
	Total  int
	Counts map[goroutineGroup]int
}

// replicaProfiles are one incarnation's profiles: its first after the
// warm-up, the floor the check compares with, and the one with the most
// unexplained goroutines once they grew past the check's rule.
type replicaProfiles struct {
	start        time.Time
	floor        float64 // the most unexplained goroutines in the first samples after warm-up
	floorSamples int
	peak         float64
	Base, Peak   *goroutineProfile
}

// profiles captures goroutine profiles of replicas whose unexplained
// goroutines grow, so that a growth violation names the code holding them.
type profiles struct {
	mu sync.Mutex
	by map[string]*replicaProfiles // replica/incarnation
}

func profileKey(replica string, inc int) string { return fmt.Sprintf("%s/%d", replica, inc) }

func (p *profiles) get(replica string, inc int) *replicaProfiles {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.by[profileKey(replica, inc)]
}

// observe takes sample sm of the replica at addr: it profiles the
// incarnation once after its warm-up, and again whenever its unexplained
// goroutines pass both the growth rule against that floor and the last
// profile's.
func (p *profiles) observe(hc *http.Client, addr string, sm sample) {
	p.mu.Lock()
	if p.by == nil {
		p.by = map[string]*replicaProfiles{}
	}
	k := profileKey(sm.Replica, sm.Incarnation)
	rp := p.by[k]
	if rp == nil {
		rp = &replicaProfiles{start: sm.At}
		p.by[k] = rp
	}
	p.mu.Unlock()
	if sm.At.Sub(rp.start) < growthWarmup {
		return
	}
	u := unexplained(sm)
	if rp.floorSamples < growthSamples/4 {
		rp.floor = max(rp.floor, u)
		rp.floorSamples++
		if rp.Base == nil {
			rp.Base = fetchGoroutines(hc, addr)
		}
		return
	}
	if !grows(rp.floor, u) || u <= rp.peak*1.25 {
		return
	}
	if gp := fetchGoroutines(hc, addr); gp != nil {
		rp.peak, rp.Peak = u, gp
	}
}

// fetchGoroutines reads the replica's goroutine profile (BAE_PPROF), nil
// when it cannot.
func fetchGoroutines(hc *http.Client, addr string) *goroutineProfile {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/goroutine?debug=2", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	gp, err := parseGoroutines(resp.Body)
	if err != nil {
		return nil
	}
	gp.At = time.Now()
	return gp
}

// parseGoroutines groups a debug=2 goroutine dump: each goroutine by the
// function that started it ("created by") and the first frame outside the
// runtime and the standard library's waits (where it is held).
func parseGoroutines(r io.Reader) (*goroutineProfile, error) {
	gp := &goroutineProfile{Counts: map[goroutineGroup]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	var g goroutineGroup
	first := "" // the top frame, for a goroutine held in the runtime or standard library only
	in := false
	flush := func() {
		if in {
			if g.CreatedBy == "" {
				g.CreatedBy = "(main)"
			}
			if g.WaitingIn == "" {
				g.WaitingIn = first
			}
			gp.Counts[g]++
			gp.Total++
		}
		g, first, in = goroutineGroup{}, "", false
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "goroutine "):
			flush()
			in = true
		case strings.HasPrefix(line, "created by "):
			fn, _, _ := strings.Cut(strings.TrimPrefix(line, "created by "), " in goroutine")
			g.CreatedBy = fn
		case in && line != "" && !strings.HasPrefix(line, "\t"):
			fn := line
			if i := strings.LastIndex(fn, "("); i > 0 {
				fn = fn[:i] // the arguments
			}
			if first == "" {
				first = fn
			}
			if g.WaitingIn == "" && !isWaitFrame(fn) {
				g.WaitingIn = fn
			}
		}
	}
	flush()
	return gp, sc.Err()
}

// isWaitFrame is a frame of the runtime or of the standard library's
// blocking calls, skipped to find the code that waits.
func isWaitFrame(frame string) bool {
	for _, p := range []string{"runtime.", "runtime/", "sync.", "internal/", "net.", "net/http.", "io.", "bufio.", "os.", "syscall.", "time.", "context.", "crypto/", "os/exec."} {
		if strings.HasPrefix(frame, p) {
			return true
		}
	}
	return false
}

// topGrowth is the groups that grew most from base to peak, as lines for
// a violation: count at the peak, change, and the group.
func topGrowth(base, peak *goroutineProfile, n int) []string {
	type row struct {
		g           goroutineGroup
		from, to, d int
	}
	var rows []row
	for g, c := range peak.Counts {
		b := 0
		if base != nil {
			b = base.Counts[g]
		}
		rows = append(rows, row{g, b, c, c - b})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].d != rows[j].d {
			return rows[i].d > rows[j].d
		}
		return rows[i].g.CreatedBy < rows[j].g.CreatedBy
	})
	bt := 0
	if base != nil {
		bt = base.Total
	}
	out := []string{fmt.Sprintf("goroutine profile at %s: %d goroutines (%d after warm-up); top growth by creation site:",
		peak.At.UTC().Format("15:04:05"), peak.Total, bt)}
	for i, r := range rows {
		if i == n || r.d <= 0 {
			break
		}
		out = append(out, fmt.Sprintf("  %+5d (%d -> %d) created by %s, waiting in %s", r.d, r.from, r.to, r.g.CreatedBy, r.g.WaitingIn))
	}
	return out
}
