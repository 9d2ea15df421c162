package fakeprovider

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
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
// With thinking (Anthropic's extended-thinking guide, "Extended thinking
// with prompt caching" and "Thinking block preservation"; the
// prompt-caching guide's "What invalidates the cache"):
//   - a thinking or redacted_thinking block cannot carry cache_control (a
//     400); it is cached as part of the prefix when the next request of the
//     tool-use cycle sends it back, and read from the cache it counts as
//     input like any block;
//   - models before Claude Opus 4.5 and Sonnet 4.6, and every Haiku through
//     4.5, strip the thinking blocks of turns that ended (the assistant
//     messages before the last user message that is no tool result): they
//     are not in the model's context, not counted as input, and the prefix
//     is hashed without them, so a cycle's entries written with its
//     thinking are not read once the next turn begins; later models (and
//     claude-mythos) keep every block;
//   - with thinking off, every thinking block passed is ignored;
//   - changing the thinking parameters (on or off, budget_tokens) or
//     tool_choice invalidates the message blocks' cache; tools and system
//     stay cached.
// The prefix shares and rewrites (CacheBilling.Shared, Rewrite) compare the
// prompts as sent, so they measure what the client changed, not what the
// provider strips.
//
// OpenAI: automatic. A request's prompt (tools, then messages) hits the
// longest prefix it shares with a recent prompt routed to the same cache
// (same prompt_cache_key and first 256 tokens), counted from 1,024 tokens
// in 128-token increments, reported as usage.prompt_tokens_details
// .cached_tokens.
// Chat Completions returns no reasoning items: nothing of a reasoning
// model's thinking enters the next prompt, so reasoning_effort leaves the
// prefixes unchanged.
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
	// Input is every input token of the request: Uncached + Read + Write
	// (thinking blocks the model strips are not input).
	Input int
	// Ignored is the tokens of thinking blocks the model stripped from its
	// context (see the rules above).
	Ignored int
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
		var seen []block // the blocks in the model's context
		ignored := 0     // bytes as sent, less bytes seen
		for _, bl := range blocks {
			if bl.thinking && bl.ttl > 0 {
				return nil, &cacheError{"cache_control cannot be set for thinking blocks"}
			}
			rendered = append(rendered, bl.content...)
			ignored += len(bl.content) - len(bl.seen)
			if !bl.ignored {
				seen = append(seen, bl)
			}
		}
		b.Ignored = ignored / 4
		b.Input = max(b.Input-b.Ignored, 1)
		c.billAnthropic(b, rec.Lane, seen, messageCacheKey(rec.Body), now())
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
	// seen is the content as the model sees it (framed without the
	// message's ignored blocks; nil for an ignored block).
	seen []byte
	// message: the block is a message's (not a tool's or the system's).
	message bool
	// thinking: a thinking or redacted_thinking block; ignored: one the
	// model strips from its context.
	thinking, ignored bool
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
// one text block. A thinking block the model strips is marked ignored, and
// each block's seen is its content framed as the model sees the message
// without them.
func renderAnthropic(body map[string]any) []block {
	var out []block
	item := func(v any) block {
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
		return block{content: encode(v), ttl: ttl, thinking: m["type"] == "thinking" || m["type"] == "redacted_thinking"}
	}
	top := func(v any) {
		b := item(v)
		b.content = append(b.content, ',')
		b.seen = b.content
		out = append(out, b)
	}
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		top(t)
	}
	switch sys := body["system"].(type) {
	case string:
		top(map[string]any{"type": "text", "text": sys})
	case []any:
		for _, b := range sys {
			top(b)
		}
	}
	msgs, _ := body["messages"].([]any)
	strip := thinkingStripped(body)
	for i, m := range msgs {
		msg, _ := m.(map[string]any)
		role, _ := msg["role"].(string)
		var content []any
		switch c := msg["content"].(type) {
		case string:
			content = []any{map[string]any{"type": "text", "text": c}}
		case []any:
			content = c
		}
		blocks := make([]block, len(content))
		kept := []int{}
		for j, c := range content {
			blocks[j] = item(c)
			blocks[j].message = true
			blocks[j].ignored = blocks[j].thinking && strip(i)
			if !blocks[j].ignored {
				kept = append(kept, j)
			}
		}
		frame := func(raw []byte, first, last bool) []byte {
			out := []byte(",")
			if first {
				out = []byte(`{"role":` + string(encode(role)) + `,"content":[`)
			}
			out = append(out, raw...)
			if last {
				out = append(out, "]},"...)
			}
			return out
		}
		for j := range blocks {
			raw := blocks[j].content
			blocks[j].content = frame(raw, j == 0, j == len(blocks)-1)
			if k := slices.Index(kept, j); k >= 0 {
				blocks[j].seen = frame(raw, k == 0, k == len(kept)-1)
			}
		}
		out = append(out, blocks...)
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

// billAnthropic bills the blocks the model sees; msgKey keys the message
// blocks' hashes (the settings whose change invalidates them).
func (c *cacheState) billAnthropic(b *CacheBilling, lane string, blocks []block, msgKey []byte, now time.Time) {
	entries := c.entries[lane]
	if entries == nil {
		entries = map[[32]byte]cacheEntry{}
		c.entries[lane] = entries
	}
	hashes := make([][32]byte, len(blocks))
	tokens := make([]int, len(blocks)) // rendered tokens through block i
	h := sha256.New()
	total := 0
	keyed := false
	for i, bl := range blocks {
		if bl.message && !keyed {
			h.Write(msgKey)
			keyed = true
		}
		h.Write(bl.seen)
		copy(hashes[i][:], h.Sum(nil))
		total += len(bl.seen)
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
