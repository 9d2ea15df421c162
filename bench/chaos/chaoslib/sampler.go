package chaoslib

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sampleEvery is how often each replica's /metrics is scraped.
const sampleEvery = 5 * time.Second

// sample is one scrape of one replica incarnation.
type sample struct {
	Replica     string
	Incarnation int
	At          time.Time
	Goroutines  float64
	HeapBytes   float64
	// HeapGoal is the heap size at which the next GC runs, which the
	// runtime sets at each GC from the heap it found live (twice it, at
	// the default GOGC): unlike HeapBytes it does not swing with the
	// garbage made since the last GC, most of the heap in use on a
	// contended machine where the GC runs late.
	HeapGoal float64
	RSSBytes float64
	// Requests is how many of the clients' requests to the replica were
	// open (streams included), MCPSessions how many sessions had an MCP
	// connection on it (bae_mcp_sessions_live): with Workflows, the load
	// its goroutines serve, bounded by the clients and the sessions, not
	// by time.
	Requests    float64
	MCPSessions float64
	// Workflows is how many workflows the replica's worker keeps loaded
	// (temporal_sticky_cache_size), each with its coroutines: bounded by
	// the sessions and BAE_WORKFLOW_CACHE_SIZE.
	Workflows float64
}

// sampler scrapes every live replica's Go runtime metrics, and its
// goroutine profile when the goroutines the load does not explain grow
// (profiles).
type sampler struct {
	topo     *topology
	samples  []sample
	profiles profiles
}

func (s *sampler) loop(stop <-chan struct{}) {
	hc := &http.Client{Timeout: 3 * time.Second}
	for {
		for _, r := range s.topo.live() {
			r.mu.Lock()
			inc := r.incarnation
			r.mu.Unlock()
			open := r.open.Load()
			if sm, ok := scrape(hc, r.adminAddr); ok {
				sm.Replica, sm.Incarnation = r.name, inc
				sm.Requests = float64(max(open, r.open.Load()))
				s.samples = append(s.samples, sm)
				s.profiles.observe(hc, r.adminAddr, sm)
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(sampleEvery):
		}
	}
}

func scrape(hc *http.Client, addr string) (sample, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return sample{}, false
	}
	defer resp.Body.Close()
	sm := sample{At: time.Now()}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	found := 0
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			sm.Goroutines = v
			found++
		case "go_memstats_heap_inuse_bytes":
			sm.HeapBytes = v
			found++
		case "go_memstats_next_gc_bytes":
			sm.HeapGoal = v
		case "process_resident_memory_bytes":
			sm.RSSBytes = v
		case "bae_mcp_sessions_live":
			sm.MCPSessions = v
		case "temporal_sticky_cache_size":
			sm.Workflows += v // a series per workflow type
		}
	}
	return sm, found == 2
}
