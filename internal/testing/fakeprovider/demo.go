package fakeprovider

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/bae-go/bae-go/internal/provider"
)

// demoToolPrefix marks tool_use ids the Demo responder made, so it answers
// only the tool results of its own calls and a scripted exchange is never
// mistaken for one.
const demoToolPrefix = "toolu_demo_"

// timeQuestion recognises a request for the time ("what time is it?",
// "tell me the time in Tokyo").
var timeQuestion = regexp.MustCompile(`(?i)\b(what time|the time|time is it|current time)\b`)

// Demo is a responder that shows the tool-call loop without a model, for
// the dev fake provider (cmd/fakeprovider). It echoes like the default,
// except that
//
//   - a message that names one of the request's tools (e.g. "use
//     count_words on …"), or asks for the time while a tool with "time" in
//     its name is declared, gets a tool_use for that tool; and
//   - the tool results of such a call get a text answer quoting them.
//
// Tool inputs are filled from the tool's JSON schema: required string
// properties get the user's text after its first colon, or all of it
// ("UTC" for a time zone), numbers 0, booleans false.
func Demo(rec Recorded) Reply {
	if rec.HasToolResult() {
		if results := rec.demoResults(); len(results) > 0 {
			return Text(strings.Join(results, "\n"))
		}
		return Echo()
	}
	text := rec.LastUserText()
	tool, ok := rec.pickTool(text)
	if !ok {
		return Echo()
	}
	return ToolUse(fmt.Sprintf("%s%d", demoToolPrefix, rec.Seq), tool.name, tool.input(text)).
		WithText("Calling " + tool.name + ".")
}

// declaredTool is one entry of the request's tools, in either format.
type declaredTool struct {
	name   string
	schema map[string]any
}

func (r Recorded) tools() []declaredTool {
	arr, _ := r.Body["tools"].([]any)
	var out []declaredTool
	for _, t := range arr {
		tool, _ := t.(map[string]any)
		if fn, ok := tool["function"].(map[string]any); ok { // OpenAI
			tool = fn
		}
		name, _ := tool["name"].(string)
		if name == "" {
			continue
		}
		schema, _ := tool["input_schema"].(map[string]any) // Anthropic
		if schema == nil {
			schema, _ = tool["parameters"].(map[string]any) // OpenAI
		}
		out = append(out, declaredTool{name: name, schema: schema})
	}
	return out
}

// pickTool prefers a tool named in the text, then a time tool for a time
// question.
func (r Recorded) pickTool(text string) (declaredTool, bool) {
	tools := r.tools()
	lower := strings.ToLower(text)
	// Longest name first, so "get_time_zone" wins over "get_time".
	sort.SliceStable(tools, func(i, j int) bool { return len(tools[i].name) > len(tools[j].name) })
	for _, t := range tools {
		if strings.Contains(lower, strings.ToLower(t.name)) {
			return t, true
		}
	}
	if timeQuestion.MatchString(text) {
		for _, t := range tools {
			if strings.Contains(strings.ToLower(t.name), "time") {
				return t, true
			}
		}
	}
	return declaredTool{}, false
}

func (t declaredTool) input(text string) map[string]any {
	if _, after, ok := strings.Cut(text, ":"); ok && strings.TrimSpace(after) != "" {
		text = strings.TrimSpace(after)
	}
	in := map[string]any{}
	props, _ := t.schema["properties"].(map[string]any)
	required, _ := t.schema["required"].([]any)
	for _, r := range required {
		name, _ := r.(string)
		prop, _ := props[name].(map[string]any)
		switch prop["type"] {
		case "number", "integer":
			in[name] = 0
		case "boolean":
			in[name] = false
		default:
			lower := strings.ToLower(name)
			if strings.Contains(lower, "zone") || lower == "tz" {
				in[name] = "UTC"
			} else {
				in[name] = text
			}
		}
	}
	return in
}

// demoResults quotes the results returned for the Demo's own tool calls in
// the last assistant turn; nil when that turn was not the Demo's.
func (r Recorded) demoResults() []string {
	msgs := r.Messages()
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i]["role"] == "assistant" {
			last = i
			break
		}
	}
	if last < 0 {
		return nil
	}
	names := demoCalls(msgs[last])
	if len(names) == 0 {
		return nil
	}
	var out []string
	for _, m := range msgs[last+1:] {
		if m["role"] == "tool" { // OpenAI: one message per result
			id, _ := m["tool_call_id"].(string)
			if name, ok := names[id]; ok {
				out = append(out, quoteResult(name, provider.Text(m["content"])))
			}
			continue
		}
		blocks, _ := m["content"].([]any)
		for _, b := range blocks {
			block, _ := b.(map[string]any)
			if block["type"] != "tool_result" {
				continue
			}
			id, _ := block["tool_use_id"].(string)
			if name, ok := names[id]; ok {
				out = append(out, quoteResult(name, provider.Text(block["content"])))
			}
		}
	}
	return out
}

// demoCalls maps the Demo's tool-call ids in an assistant message to tool
// names, in either format.
func demoCalls(msg map[string]any) map[string]string {
	names := map[string]string{}
	blocks, _ := msg["content"].([]any)
	for _, b := range blocks {
		block, _ := b.(map[string]any)
		id, _ := block["id"].(string)
		if block["type"] == "tool_use" && strings.HasPrefix(id, demoToolPrefix) {
			names[id], _ = block["name"].(string)
		}
	}
	calls, _ := msg["tool_calls"].([]any)
	for _, c := range calls {
		call, _ := c.(map[string]any)
		id, _ := call["id"].(string)
		fn, _ := call["function"].(map[string]any)
		if strings.HasPrefix(id, demoToolPrefix) {
			names[id], _ = fn["name"].(string)
		}
	}
	return names
}

func quoteResult(tool, result string) string {
	if strings.TrimSpace(result) == "" {
		result = "(nothing)"
	}
	return fmt.Sprintf("The %s tool returned: %s", tool, strings.TrimSpace(result))
}
