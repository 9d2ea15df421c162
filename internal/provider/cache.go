package provider

import (
	"bytes"
	"encoding/json"
)

// Prompt caching (Endpoint.PromptCache).
//
// Anthropic caches a request's prefix (rendered tools → system → messages)
// up to each block marked with cache_control, and a later request hits
// when its own breakpoint's prefix, or one of the ~20 block boundaries
// before it, equals a cached one. The hash is of the content: the marker
// is not part of it, so a breakpoint may move to the newest message each
// request while the blocks before it stay as they were. What makes the
// cache hit is therefore byte stability: the same stored conversation
// always renders to the same bytes here (raw stored bytes copied, or maps
// encoded with sorted keys), and adding or removing a marker inserts or
// deletes exactly the marker's bytes.
//
// Breakpoints, at most three of Anthropic's four (bae-go sends no system
// prompt):
//   - the last tool: the declarations are the same for the whole session
//     (and across sessions of one profile), so even a compaction, which
//     rewrites the messages, still reads them from the cache;
//   - the last block of the newest message: the next request's prefix;
//   - in a long tool loop, the last block of the message before the latest
//     assistant message — the previous request's own breakpoint — when the
//     blocks appended since then would put it beyond the look-back.
//
// OpenAI caches prefixes of 1,024 tokens and more by itself; the request
// names the session as prompt_cache_key so its requests are routed to the
// same cache.

// cacheMarker is what a breakpoint adds to a block (or tool) object.
const cacheMarker = `"cache_control":{"type":"ephemeral"}`

// lookbackMargin is how many blocks may be appended after the previous
// request's breakpoint before it is marked again: well inside Anthropic's
// ~20-block look-back, so a hit never depends on its exact size.
const lookbackMargin = 12

// breakpoints picks the messages whose last block carries a breakpoint,
// from each message's role and block count: the newest message, and the
// previous request's last message when too many blocks follow it.
func breakpoints(roles []string, blocks []int) []int {
	last := len(roles) - 1
	if last < 0 {
		return nil
	}
	marks := []int{last}
	// The previous request ended just before the latest assistant message
	// (its answer); everything after was appended since.
	for a := last; a > 0; a-- {
		if roles[a] != "assistant" {
			continue
		}
		prev := a - 1
		n := 0
		for i := prev + 1; i <= last; i++ {
			n += blocks[i]
		}
		if n >= lookbackMargin && blocks[prev] > 0 {
			marks = append(marks, prev)
		}
		break
	}
	return marks
}

// cacheable reports whether canonical messages can be marked as stored
// (cacheRaw): a valid JSON array.
func cacheable(on bool, messages json.RawMessage) (json.RawMessage, bool) {
	if !on {
		return nil, false
	}
	raw := bytes.TrimSpace(messages)
	if len(raw) == 0 || raw[0] != '[' || !json.Valid(raw) {
		return nil, false
	}
	return raw, true
}

// markTools marks the last tool as a breakpoint (the maps are parseTools'
// own, so marking in place is safe).
func markTools(tools []map[string]any) {
	if len(tools) > 0 {
		tools[len(tools)-1]["cache_control"] = map[string]any{"type": "ephemeral"}
	}
}

// cacheDecoded prepares decoded canonical messages for caching: string
// content becomes its one text block (so marking a message never changes
// its shape from one request to the next) and the breakpoint messages'
// last blocks get the marker.
func cacheDecoded(msgs []any) {
	roles := make([]string, len(msgs))
	blocks := make([]int, len(msgs))
	for i, m := range msgs {
		msg, ok := m.(map[string]any)
		if !ok {
			continue
		}
		roles[i] = stringField(msg, "role")
		if s, ok := msg["content"].(string); ok {
			msg["content"] = []any{map[string]any{"type": "text", "text": s}}
		}
		arr, _ := msg["content"].([]any)
		blocks[i] = len(arr)
	}
	for _, i := range breakpoints(roles, blocks) {
		msg, _ := msgs[i].(map[string]any)
		arr, _ := msg["content"].([]any)
		if len(arr) == 0 {
			continue
		}
		if b, ok := arr[len(arr)-1].(map[string]any); ok {
			b["cache_control"] = map[string]any{"type": "ephemeral"}
		}
	}
}

// cacheRaw is cacheDecoded for a valid JSON array of canonical messages
// as stored, without decoding them: the bytes of every message are kept
// but for three splices, each the same for the same stored message
// whatever its position — string content is wrapped into a text block
// around its raw string, the internal tool_use fields are cut out, and a
// breakpoint's marker is inserted before its last block's closing brace.
// A message it cannot read is copied unchanged.
func cacheRaw(raw []byte) []byte {
	spans := arrayElems(raw)
	type msgInfo struct {
		content    [2]int // span of the content value within the message
		str        bool
		blockSpans [][2]int // content blocks, within the message
	}
	infos := make([]msgInfo, len(spans))
	roles := make([]string, len(spans))
	blocks := make([]int, len(spans))
	latest := -1 // the latest assistant message
	for i, sp := range spans {
		msg := raw[sp[0]:sp[1]]
		// Only "assistant" matters to breakpoints.
		if rs, ok := memberStart(msg, "role"); ok && bytes.HasPrefix(msg[rs:], []byte(`"assistant"`)) {
			roles[i] = "assistant"
			latest = i
		}
		if cs, ok := memberStart(msg, "content"); ok {
			infos[i].content[0] = cs
		} else {
			infos[i].content[0] = -1
		}
	}
	for i, sp := range spans {
		msg := raw[sp[0]:sp[1]]
		info := &infos[i]
		cs := info.content[0]
		if cs < 0 {
			continue
		}
		switch msg[cs] {
		case '"':
			info.content[1] = stringEnd(msg, cs)
			info.str = true
			blocks[i] = 1
		case '[':
			// Blocks are needed where a breakpoint may go (from the
			// message before the latest assistant one on) and where
			// internal fields are cut; elsewhere the message is copied.
			blocks[i] = 1
			if i < latest-1 && !hasInternalField(msg) {
				continue
			}
			info.content[1] = valueEnd(msg, cs)
			for _, b := range arrayElems(msg[cs:info.content[1]]) {
				info.blockSpans = append(info.blockSpans, [2]int{cs + b[0], cs + b[1]})
			}
			blocks[i] = len(info.blockSpans)
			// Only an object block can take a marker.
			if n := len(info.blockSpans); n > 0 && msg[info.blockSpans[n-1][1]-1] != '}' {
				blocks[i] = 0
			}
		}
	}
	marked := make([]bool, len(spans))
	for _, i := range breakpoints(roles, blocks) {
		marked[i] = true
	}
	out := make([]byte, 0, len(raw)+256)
	out = append(out, '[')
	for i, sp := range spans {
		if i > 0 {
			out = append(out, ',')
		}
		msg := raw[sp[0]:sp[1]]
		info := infos[i]
		switch {
		case info.str:
			out = append(out, msg[:info.content[0]]...)
			out = append(out, `[{"type":"text","text":`...)
			out = append(out, msg[info.content[0]:info.content[1]]...)
			if marked[i] {
				out = append(out, ',')
				out = append(out, cacheMarker...)
			}
			out = append(out, `}]`...)
			out = append(out, msg[info.content[1]:]...)
		case len(info.blockSpans) > 0 && (marked[i] && blocks[i] > 0 || hasInternalField(msg)):
			out = append(out, msg[:info.content[0]]...)
			out = append(out, '[')
			for j, b := range info.blockSpans {
				if j > 0 {
					out = append(out, ',')
				}
				blk := stripInternal(msg[b[0]:b[1]])
				if j == len(info.blockSpans)-1 && marked[i] && blocks[i] > 0 {
					end := len(blk) - 1 // the block's '}'
					out = append(out, blk[:end]...)
					if !emptyObjectBefore(blk, end) {
						out = append(out, ',')
					}
					out = append(out, cacheMarker...)
					out = append(out, '}')
					continue
				}
				out = append(out, blk...)
			}
			out = append(out, ']')
			out = append(out, msg[info.content[1]:]...)
		default:
			out = append(out, msg...)
		}
	}
	return append(out, ']')
}

func hasInternalField(b []byte) bool {
	for _, f := range internalBlockFields {
		if bytes.Contains(b, []byte(`"`+f+`"`)) {
			return true
		}
	}
	return false
}

// stripInternal is a tool_use block without its internal fields (the
// block itself when it has none), other members' bytes kept.
func stripInternal(blk []byte) []byte {
	if !hasInternalField(blk) {
		return blk
	}
	if ts, te, ok := member(blk, "type"); !ok || string(blk[ts:te]) != `"tool_use"` {
		return blk
	}
	out := make([]byte, 0, len(blk))
	out = append(out, '{')
	n := 0
	eachMember(blk, func(key []byte, from, to int) bool {
		for _, f := range internalBlockFields {
			if string(key) == `"`+f+`"` {
				return true
			}
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, blk[from:to]...)
		n++
		return true
	})
	return append(out, '}')
}

// emptyObjectBefore reports whether the object closing at msg[end] has no
// members (its '{' is the last non-space byte before end).
func emptyObjectBefore(msg []byte, end int) bool {
	i := end - 1
	for i >= 0 && isSpace(msg[i]) {
		i--
	}
	return i >= 0 && msg[i] == '{'
}

// The scanner below reads valid JSON (callers check json.Valid first) just
// far enough to find element and member boundaries, without decoding.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringEnd is the index just past the string starting at b[i] ('"'):
// the next quote not escaped by an odd run of backslashes, found with
// IndexByte rather than byte by byte (conversations are mostly strings).
func stringEnd(b []byte, i int) int {
	from := i + 1
	for {
		j := bytes.IndexByte(b[from:], '"')
		if j < 0 {
			return len(b)
		}
		k := from + j
		n := 0
		for m := k - 1; m > i && b[m] == '\\'; m-- {
			n++
		}
		if n%2 == 0 {
			return k + 1
		}
		from = k + 1
	}
}

// valueEnd is the index just past the value starting at b[i].
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
		i++
	}
	return i
}

// arrayElems are the spans of the elements of the array b.
func arrayElems(b []byte) [][2]int {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil
	}
	var spans [][2]int
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] != ']' {
		e := valueEnd(b, i)
		spans = append(spans, [2]int{i, e})
		i = skipSpace(b, e)
		if i >= len(b) || b[i] != ',' {
			break
		}
		i = skipSpace(b, i+1)
	}
	return spans
}

// eachMember calls fn with each member of the object b: its raw key and
// the span from the key to the end of its value, until fn returns false.
func eachMember(b []byte, fn func(key []byte, from, to int) bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		from := i
		ke := stringEnd(b, i)
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return
		}
		i = skipSpace(b, i+1)
		ve := valueEnd(b, i)
		if !fn(b[from:ke], from, ve) {
			return
		}
		i = skipSpace(b, ve)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = skipSpace(b, i+1)
	}
}

// memberStart is where key's value starts in the object b (its end is
// not looked for).
func memberStart(b []byte, key string) (int, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		ke := stringEnd(b, i)
		k := b[i:ke]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipSpace(b, i+1)
		if string(k) == `"`+key+`"` {
			return i, true
		}
		i = skipSpace(b, valueEnd(b, i))
		if i >= len(b) || b[i] != ',' {
			return 0, false
		}
		i = skipSpace(b, i+1)
	}
	return 0, false
}

// member is the span of key's value in the object b.
func member(b []byte, key string) (int, int, bool) {
	want := `"` + key + `"`
	start, end, found := 0, 0, false
	eachMember(b, func(k []byte, from, to int) bool {
		if string(k) == want {
			found = true
			end = to
			start = skipSpace(b, skipSpace(b, from+len(k))+1)
		}
		return !found
	})
	return start, end, found
}
