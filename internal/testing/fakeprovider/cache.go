package fakeprovider

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"
)

// Prompt caching as the providers document it, so a test or bench can tell
// whether bae-go's requests would hit the cache and what they would bill.
//
// Anthropic: the prompt renders as tools → system → messages, one block per
// tool, system block and message content block (string content is one text
// block). A block carrying cache_control is a breakpoint (at most 4: more
// is a 400 invalid_request_error). The cache is keyed by a hash of the
// content before and including the breakpoint's block — cache_control
// itself is not content, so moving a marker does not change a hash. A
// breakpoint hits when its own prefix, or one ending at one of the 20
// block boundaries before it, is cached and not expired (5 minutes, or 1
// hour with "ttl":"1h", refreshed by each hit). Prefixes under 1,024 tokens
// are not cached. Usage reports input_tokens (after the last cached or
// written position), cache_read_input_tokens and
// cache_creation_input_tokens; reads bill 0.1×, writes 1.25×.
//
// OpenAI: automatic. A request's prompt (tools, then messages) hits the
// longest prefix it shares with a recent prompt routed to the same cache
// (same prompt_cache_key and first 256 tokens), counted from 1,024 tokens
// in 128-token increments, reported as usage.prompt_tokens_details
// .cached_tokens.
//
// Tokens are about 4 bytes each, of the body (InputTokens) for a request's
// total and of the rendered content (which is framed like the body) for
// its cached prefixes.

// Caching constants, as documented by the providers.
const (
	CacheMinTokens    = 1024
	CacheLookback     = 20
	CacheMaxBreaks    = 4
	CacheTTL          = 5 * time.Minute
	CacheTTLLong      = time.Hour
	openAICacheStep   = 128
	openAIRouteTokens = 256
	// openAIKept bounds the prompts remembered per route.
	openAIKept = 4
)

// CacheBilling is how the caching fake counted one request.
type CacheBilling struct {
	Seq    int
	Lane   string
	Format Format
	// Key is the request's prompt_cache_key ("" when none).
	Key string
	// Input is every input token of the request: Uncached + Read + Write.
	Input int
	// Prompt is the tokens of the rendered prompt (Input without the
	// request's own fields: model, max_tokens, markers).
	Prompt   int
	Uncached int
	// Read and Write are the cached tokens read and written (Anthropic;
	// OpenAI reads only).
	Read, Write int
	// Breakpoints is how many cache_control markers the request carried.
	Breakpoints int
	// Shared is the tokens of the rendered prompt identical to the start
	// of the previous request's of the same lane and key; Prev is that
	// previous prompt's size (0 for a first request).
	Shared, Prev int
	// Rewrite: the previous prompt of the lane and key is not a prefix of
	// this one (something before the appended part changed).
	Rewrite bool
}

// Billed is the request's input cost in uncached-input-token units at
// Anthropic's multipliers (reads 0.1×, writes 1.25×).
func (b CacheBilling) Billed() float64 {
	return float64(b.Uncached) + 0.1*float64(b.Read) + 1.25*float64(b.Write)
}

// cacheState is the fake's prompt caches.
type cacheState struct {
	on  bool
	now func() time.Time
	// anthropic: prefix hash → expiry, per lane.
	entries map[string]map[[32]byte]cacheEntry
	// openai: recent prompts per route.
	prompts map[string][]prompt
	// last rendered prompt per lane and key, for Shared/Rewrite.
	last   map[string][]byte
	ledger []CacheBilling
}

type prompt struct {
	text []byte
	at   time.Time
}

type cacheEntry struct {
	expires time.Time
	ttl     time.Duration
}

// Caching turns the prompt-cache emulation on or off. Off (the default),
// usage carries no cache fields and nothing is cached.
func (s *Server) Caching(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.on = on
}

// SetClock replaces time.Now for cache expiry (tests of the TTL).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.now = now
}

// CacheLedger is what the caching fake billed, one entry per request it
// answered or refused for its breakpoints, in arrival order.
func (s *Server) CacheLedger() []CacheBilling {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]CacheBilling(nil), s.cache.ledger...)
}

// cacheError is a request the provider refuses for its cache markers.
type cacheError struct{ message string }

func (e *cacheError) Error() string { return e.message }

// bill applies the cache to a request (s.mu held). It returns nil when
// caching is off or the body is not a request it can read.
func (c *cacheState) bill(rec Recorded) (*CacheBilling, error) {
	if !c.on || rec.Body == nil {
		return nil, nil
	}
	if c.entries == nil {
		c.entries = map[string]map[[32]byte]cacheEntry{}
		c.prompts = map[string][]prompt{}
		c.last = map[string][]byte{}
	}
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	b := &CacheBilling{Seq: rec.Seq, Lane: rec.Lane, Format: rec.Format, Input: InputTokens(rec.RawBody)}
	b.Key, _ = rec.Body["prompt_cache_key"].(string)
	var rendered []byte
	if rec.Format == OpenAI {
		rendered = renderOpenAI(rec.Body)
		c.billOpenAI(b, rec.Lane, rendered, now())
	} else {
		blocks := renderAnthropic(rec.Body)
		if n := countBreaks(blocks); n > CacheMaxBreaks {
			return nil, &cacheError{fmt.Sprintf("A maximum of %d blocks with cache_control may be provided. Found %d.", CacheMaxBreaks, n)}
		}
		for _, bl := range blocks {
			rendered = append(rendered, bl.content...)
		}
		c.billAnthropic(b, rec.Lane, blocks, now())
	}
	b.Uncached = max(b.Input-b.Read-b.Write, 0)
	b.Prompt = len(rendered) / 4
	id := rec.Lane + "\x00" + b.Key
	if prev, ok := c.last[id]; ok {
		lcp := commonPrefix(prev, rendered)
		b.Shared, b.Prev = lcp/4, len(prev)/4
		b.Rewrite = lcp < len(prev)
	}
	c.last[id] = rendered
	c.ledger = append(c.ledger, *b)
	return b, nil
}

// block is one rendered prompt block.
type block struct {
	content []byte
	// ttl is the block's breakpoint TTL, 0 when it is not a breakpoint.
	ttl time.Duration
}

func countBreaks(blocks []block) int {
	n := 0
	for _, b := range blocks {
		if b.ttl > 0 {
			n++
		}
	}
	return n
}

// renderAnthropic is the request's blocks in render order, each its
// content without cache_control (keys sorted), framed as the request's
// JSON frames it (a message's role before its first block, a separator
// after each), so the rendered prompt counts about the tokens of the body
// but the model, max_tokens and markers. String content renders as its
// one text block.
func renderAnthropic(body map[string]any) []block {
	var out []block
	add := func(before string, v any, after string) {
		m, _ := v.(map[string]any)
		var ttl time.Duration
		if cc, ok := m["cache_control"].(map[string]any); ok {
			ttl = CacheTTL
			if cc["ttl"] == "1h" {
				ttl = CacheTTLLong
			}
			c := make(map[string]any, len(m))
			for k, x := range m {
				if k != "cache_control" {
					c[k] = x
				}
			}
			v = c
		}
		content := append([]byte(before), encode(v)...)
		out = append(out, block{content: append(content, after...), ttl: ttl})
	}
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		add("", t, ",")
	}
	switch sys := body["system"].(type) {
	case string:
		add("", map[string]any{"type": "text", "text": sys}, ",")
	case []any:
		for _, b := range sys {
			add("", b, ",")
		}
	}
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		msg, _ := m.(map[string]any)
		role, _ := msg["role"].(string)
		open := `{"role":` + string(encode(role)) + `,"content":[`
		switch content := msg["content"].(type) {
		case string:
			add(open, map[string]any{"type": "text", "text": content}, "]},")
		case []any:
			for i, b := range content {
				before, after := ",", ""
				if i == 0 {
					before = open
				}
				if i == len(content)-1 {
					after = "]},"
				}
				add(before, b, after)
			}
		}
	}
	return out
}

// encode is v's JSON, keys sorted, without HTML escaping (as a client
// sends it).
func encode(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func (c *cacheState) billAnthropic(b *CacheBilling, lane string, blocks []block, now time.Time) {
	entries := c.entries[lane]
	if entries == nil {
		entries = map[[32]byte]cacheEntry{}
		c.entries[lane] = entries
	}
	hashes := make([][32]byte, len(blocks))
	tokens := make([]int, len(blocks)) // rendered tokens through block i
	h := sha256.New()
	total := 0
	for i, bl := range blocks {
		h.Write(bl.content)
		copy(hashes[i][:], h.Sum(nil))
		total += len(bl.content)
		tokens[i] = total / 4
	}
	readAt, lastBreak := -1, -1
	for i, bl := range blocks {
		if bl.ttl == 0 {
			continue
		}
		b.Breakpoints++
		lastBreak = i
		for j := i; j >= 0 && j >= i-CacheLookback; j-- {
			if e, ok := entries[hashes[j]]; ok && now.Before(e.expires) {
				if j > readAt {
					readAt = j
				}
				e.expires = now.Add(e.ttl)
				entries[hashes[j]] = e
				break
			}
		}
	}
	if readAt >= 0 {
		b.Read = tokens[readAt]
	}
	for i, bl := range blocks {
		if bl.ttl > 0 && tokens[i] >= CacheMinTokens {
			entries[hashes[i]] = cacheEntry{expires: now.Add(bl.ttl), ttl: bl.ttl}
		}
	}
	if lastBreak >= 0 && tokens[lastBreak] >= CacheMinTokens && tokens[lastBreak] > b.Read {
		b.Write = tokens[lastBreak] - b.Read
	}
	// The rendered content is a little smaller than the body the total is
	// counted from; never bill more cached than sent.
	b.Read, b.Write = min(b.Read, b.Input), min(b.Write, b.Input-min(b.Read, b.Input))
}

// renderOpenAI is the request's prompt: tools, then messages, each encoded
// with sorted keys.
func renderOpenAI(body map[string]any) []byte {
	var out []byte
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		out = append(out, encode(t)...)
		out = append(out, ',')
	}
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		out = append(out, encode(m)...)
		out = append(out, ',')
	}
	return out
}

func (c *cacheState) billOpenAI(b *CacheBilling, lane string, rendered []byte, now time.Time) {
	head := rendered[:min(len(rendered), openAIRouteTokens*4)]
	sum := sha256.Sum256(head)
	route := lane + "\x00" + b.Key + "\x00" + string(sum[:])
	best := 0
	var kept []prompt
	for _, p := range c.prompts[route] {
		if now.Sub(p.at) > CacheTTL {
			continue // evicted after 5 minutes idle
		}
		best = max(best, commonPrefix(p.text, rendered))
		kept = append(kept, p)
	}
	if t := best / 4; t >= CacheMinTokens {
		b.Read = min(CacheMinTokens+(t-CacheMinTokens)/openAICacheStep*openAICacheStep, b.Input)
	}
	kept = append(kept, prompt{text: rendered, at: now})
	if len(kept) > openAIKept {
		kept = kept[len(kept)-openAIKept:]
	}
	c.prompts[route] = kept
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	// Compare in chunks first: prompts share long prefixes.
	i := 0
	for i+4096 <= n && bytes.Equal(a[i:i+4096], b[i:i+4096]) {
		i += 4096
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// WithoutCacheControl is v (a decoded JSON value) with every cache_control
// member removed: what a request carried, prompt-cache markers aside (the
// markers are transport, like "stream"; provider.request events do not
// record them).
func WithoutCacheControl(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if k != "cache_control" {
				out[k] = WithoutCacheControl(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = WithoutCacheControl(e)
		}
		return out
	}
	return v
}
