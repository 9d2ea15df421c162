package activities

import (
	"encoding/json"
	"errors"
	"fmt"
)

// block is a loosely typed content block; unknown fields pass through.
type block = map[string]any

func blockType(b block) string          { s, _ := b["type"].(string); return s }
func strField(b block, k string) string { s, _ := b[k].(string); return s }

// blocksOf decodes message content as a block array; a string yields nil.
func blocksOf(content json.RawMessage) ([]block, bool) {
	var arr []block
	if err := json.Unmarshal(content, &arr); err != nil {
		return nil, false
	}
	return arr, true
}

// mergeToolResults builds the single user turn answering a paused assistant
// turn: one result per tool_use id, in the assistant's order, the server's
// stashed results winning over any client copy, then the client's other
// blocks. Any missing, duplicate or unexpected id is an error.
func mergeToolResults(toolUses, serverResults []block, clientContent json.RawMessage) ([]block, error) {
	var expected []string
	seen := map[string]bool{}
	for _, tu := range toolUses {
		id := strField(tu, "id")
		if id == "" {
			continue
		}
		if seen[id] {
			return nil, errors.New("paused assistant turn contains duplicate tool_use ids")
		}
		seen[id] = true
		expected = append(expected, id)
	}
	if len(expected) == 0 {
		return nil, errors.New("paused assistant turn has no tool_use ids")
	}
	server := map[string]block{}
	for _, b := range serverResults {
		id := strField(b, "tool_use_id")
		if id == "" {
			return nil, errors.New("server tool_result is missing a string tool_use_id")
		}
		if _, dup := server[id]; dup {
			return nil, fmt.Errorf("server produced a duplicate tool_result for id %q", id)
		}
		server[id] = b
	}
	client := map[string]block{}
	var extras []block
	if arr, ok := blocksOf(clientContent); ok {
		for _, b := range arr {
			if blockType(b) != "tool_result" {
				extras = append(extras, b)
				continue
			}
			id := strField(b, "tool_use_id")
			if _, isServer := server[id]; isServer {
				continue // the server's own result wins
			}
			if _, dup := client[id]; dup {
				return nil, fmt.Errorf("client returned a duplicate tool_result for id %q", id)
			}
			client[id] = b
		}
	}
	for id := range client {
		if !seen[id] {
			return nil, fmt.Errorf("tool_result id %q is not in the paused assistant turn", id)
		}
	}
	for id := range server {
		if !seen[id] {
			return nil, fmt.Errorf("tool_result id %q is not in the paused assistant turn", id)
		}
	}
	merged := make([]block, 0, len(expected)+len(extras))
	for _, id := range expected {
		if b, ok := server[id]; ok {
			merged = append(merged, b)
		} else if b, ok := client[id]; ok {
			merged = append(merged, b)
		} else {
			return nil, fmt.Errorf("no tool_result for tool_use id %q", id)
		}
	}
	return append(merged, extras...), nil
}

// abandonedText is the synthetic result for a client call nobody answered.
const abandonedText = "Client tool call was abandoned before returning a result."

// cancelAbandoned completes a paused turn whose client calls will never be
// answered: synthetic error results for every id the server did not answer,
// then the new message's own content.
func cancelAbandoned(toolUses, serverResults []block, incoming json.RawMessage) ([]block, error) {
	answered := map[string]bool{}
	for _, b := range serverResults {
		answered[strField(b, "tool_use_id")] = true
	}
	var content []block
	for _, tu := range toolUses {
		id := strField(tu, "id")
		if id == "" {
			return nil, errors.New("paused tool_use is missing a string id")
		}
		if !answered[id] {
			content = append(content, block{"type": "tool_result", "tool_use_id": id, "content": abandonedText, "is_error": true})
		}
	}
	var text string
	if err := json.Unmarshal(incoming, &text); err == nil {
		if text != "" {
			content = append(content, block{"type": "text", "text": text})
		}
	} else if arr, ok := blocksOf(incoming); ok {
		for _, b := range arr {
			if blockType(b) == "tool_result" {
				return nil, errors.New("timed-out replacement message must not contain tool_result blocks")
			}
		}
		content = append(content, arr...)
	} else {
		return nil, errors.New("abandonment message content must be a string or content-block array")
	}
	raw, _ := json.Marshal(content)
	return mergeToolResults(toolUses, serverResults, raw)
}

// isVoluntaryAbandonment: a non-empty message with no tool results replaces
// the owner's own pending tool continuation.
func isVoluntaryAbandonment(content json.RawMessage) bool {
	var text string
	if err := json.Unmarshal(content, &text); err == nil {
		return text != ""
	}
	arr, ok := blocksOf(content)
	if !ok || len(arr) == 0 {
		return false
	}
	for _, b := range arr {
		if blockType(b) == "tool_result" {
			return false
		}
	}
	return true
}
