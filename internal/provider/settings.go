package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Settings are a provider entry's model settings (model_settings in
// bae-config.toml, overridable per profile): what the request body carries
// besides the model, max_tokens, the conversation and the tools. The zero
// Settings sends nothing, so an entry without them sends the bytes it
// always sent. Absent fields are nil or empty; Merge lays a profile's
// over an entry's key by key.
type Settings struct {
	// Thinking is Anthropic's extended thinking.
	Thinking *Thinking `json:"thinking,omitempty" toml:"thinking"`
	// Effort is Anthropic's output_config.effort.
	Effort string `json:"effort,omitempty" toml:"effort"`
	// ReasoningEffort is OpenAI's reasoning_effort.
	ReasoningEffort string   `json:"reasoning_effort,omitempty" toml:"reasoning_effort"`
	Temperature     *float64 `json:"temperature,omitempty" toml:"temperature"`
	TopP            *float64 `json:"top_p,omitempty" toml:"top_p"`
	// TopK is Anthropic's only.
	TopK *int64 `json:"top_k,omitempty" toml:"top_k"`
	// ToolChoice is "auto", "none", "any" (OpenAI's "required") or
	// "tool:<name>"; sent only when the request declares tools, which
	// both APIs require.
	ToolChoice string `json:"tool_choice,omitempty" toml:"tool_choice"`
	// ParallelToolCalls false asks for one tool call per answer.
	ParallelToolCalls *bool  `json:"parallel_tool_calls,omitempty" toml:"parallel_tool_calls"`
	ServiceTier       string `json:"service_tier,omitempty" toml:"service_tier"`
	// Stop is Anthropic's stop_sequences, OpenAI's stop.
	Stop []string `json:"stop,omitempty" toml:"stop"`
	// Headers are extra request headers, such as anthropic-beta.
	Headers map[string]string `json:"headers,omitempty" toml:"headers"`
}

// Thinking is {"type":"adaptive"|"enabled"|"disabled"}, with budget_tokens
// for "enabled" and an optional display.
type Thinking struct {
	Type         string `json:"type" toml:"type"`
	BudgetTokens int64  `json:"budget_tokens,omitempty" toml:"budget_tokens"`
	Display      string `json:"display,omitempty" toml:"display"`
}

// Thinking types.
const (
	ThinkingAdaptive = "adaptive"
	ThinkingEnabled  = "enabled"
	ThinkingDisabled = "disabled"
)

// MinThinkingBudget is Anthropic's smallest budget_tokens.
const MinThinkingBudget = 1024

// InterleavedThinkingBeta is the anthropic-beta value that lets thinking
// happen between tool calls, and a budget reach past max_tokens.
const InterleavedThinkingBeta = "interleaved-thinking-2025-05-14"

// SettingKeys are the keys model_settings accepts: any other is refused.
var SettingKeys = []string{"thinking", "effort", "reasoning_effort", "temperature", "top_p", "top_k", "tool_choice", "parallel_tool_calls", "service_tier", "stop", "headers"}

// IsZero reports settings that send nothing.
func (s Settings) IsZero() bool {
	return s.Thinking == nil && s.Effort == "" && s.ReasoningEffort == "" && s.Temperature == nil && s.TopP == nil &&
		s.TopK == nil && s.ToolChoice == "" && s.ParallelToolCalls == nil && s.ServiceTier == "" && len(s.Stop) == 0 && len(s.Headers) == 0
}

// Merge lays over's set fields over s (a profile's override over an
// entry's settings); headers merge by name.
func (s Settings) Merge(over Settings) Settings {
	out := s
	if over.Thinking != nil {
		t := *over.Thinking
		out.Thinking = &t
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&out.Effort, over.Effort)
	set(&out.ReasoningEffort, over.ReasoningEffort)
	set(&out.ToolChoice, over.ToolChoice)
	set(&out.ServiceTier, over.ServiceTier)
	if over.Temperature != nil {
		out.Temperature = over.Temperature
	}
	if over.TopP != nil {
		out.TopP = over.TopP
	}
	if over.TopK != nil {
		out.TopK = over.TopK
	}
	if over.ParallelToolCalls != nil {
		out.ParallelToolCalls = over.ParallelToolCalls
	}
	if over.Stop != nil {
		out.Stop = over.Stop
	}
	if len(over.Headers) > 0 {
		h := make(map[string]string, len(s.Headers)+len(over.Headers))
		for k, v := range s.Headers {
			h[http.CanonicalHeaderKey(k)] = v
		}
		for k, v := range over.Headers {
			h[http.CanonicalHeaderKey(k)] = v
		}
		out.Headers = h
	}
	return out
}

// ParseSettings decodes a JSON settings object, refusing unknown keys and
// wrong types (a *SettingError with Malformed set).
func ParseSettings(raw json.RawMessage) (Settings, error) {
	var s Settings
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return s, nil
	} else if t[0] != '{' {
		return s, &SettingError{Field: "", Reason: "must be an object", Malformed: true}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Settings{}, &SettingError{Reason: err.Error(), Malformed: true}
	}
	if dec.More() {
		return Settings{}, &SettingError{Reason: "trailing data after the object", Malformed: true}
	}
	return s, nil
}

// SettingError is a refused setting: Field names it (e.g.
// "thinking.budget_tokens"); Malformed is a shape error (unknown key, wrong
// type) rather than a value the model refuses.
type SettingError struct {
	Field     string
	Reason    string
	Malformed bool
}

func (e *SettingError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

func refuse(field, format string, args ...any) error {
	return &SettingError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ThinkingModes is which thinking types a model takes, by the model-family
// rule: Claude models from version 4.7 on (and claude-mythos*) take only
// "adaptive", and refuse budget_tokens with a 400; 4.6 takes both; older
// Claude models, and names the rule cannot read, take only "enabled"
// with a budget.
func ThinkingModes(model string) []string {
	m := strings.ToLower(model)
	if i := strings.LastIndex(m, "/"); i >= 0 {
		m = m[i+1:] // a gateway's "anthropic/claude-…" names
	}
	m = strings.TrimPrefix(m, "anthropic.")
	if strings.HasPrefix(m, "claude-mythos") {
		return []string{ThinkingAdaptive}
	}
	major, minor, ok := claudeVersion(m)
	switch {
	case !ok:
		return []string{ThinkingEnabled}
	case major > 4 || major == 4 && minor >= 7:
		return []string{ThinkingAdaptive}
	case major == 4 && minor == 6:
		return []string{ThinkingAdaptive, ThinkingEnabled}
	}
	return []string{ThinkingEnabled}
}

// claudeVersion reads claude-<tier>-<major>[-<minor>] and
// claude-<major>[-<minor>]-<tier>; a date suffix (8 digits) is no minor.
var claudeName = regexp.MustCompile(`^claude-(?:[a-z]+-)?(\d+)(?:[-.](\d{1,2}))?(?:$|[-@])`)

func claudeVersion(m string) (int, int, bool) {
	sub := claudeName.FindStringSubmatch(m)
	if sub == nil {
		return 0, 0, false
	}
	major, _ := strconv.Atoi(sub[1])
	minor := 0
	if sub[2] != "" {
		minor, _ = strconv.Atoi(sub[2])
	}
	return major, minor, true
}

// ReasoningModel reports an OpenAI model family that reasons (o1, o3, o4,
// gpt-5 but its -chat models): it takes reasoning_effort and
// max_completion_tokens, and refuses temperature and top_p.
func ReasoningModel(model string) bool {
	m := strings.ToLower(model)
	if i := strings.LastIndex(m, "/"); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range []string{"o1", "o3", "o4"} {
		if m == p || strings.HasPrefix(m, p+"-") {
			return true
		}
	}
	return strings.HasPrefix(m, "gpt-5") && !strings.Contains(m, "-chat")
}

// reservedHeaders are set by the call itself; settings may not replace
// them.
var reservedHeaders = []string{"Authorization", "X-Api-Key", "Anthropic-Version", "Content-Type", "Accept", "Content-Length", "Host"}

// ThinkingOn reports settings that turn thinking (Anthropic) or reasoning
// (OpenAI) on.
func (s Settings) ThinkingOn() bool {
	return s.Thinking != nil && s.Thinking.Type != ThinkingDisabled || s.ReasoningEffort != ""
}

func (s Settings) interleaved() bool {
	for k, v := range s.Headers {
		if strings.EqualFold(k, "anthropic-beta") {
			for _, b := range strings.Split(v, ",") {
				if strings.TrimSpace(b) == InterleavedThinkingBeta {
					return true
				}
			}
		}
	}
	return false
}

// Validate checks settings against the entry they are sent with: its kind,
// model (the model-family rules) and max_tokens (0: DefaultMaxTokens).
// The first refused setting is returned as a *SettingError.
func (s Settings) Validate(kind, model string, maxTokens int) error {
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	anthropic := kind == KindAnthropic
	only := func(field string, onKind bool, which string) error {
		if !onKind {
			return refuse(field, "is an %s setting; this provider entry is %q", which, kind)
		}
		return nil
	}
	thinking := s.Thinking != nil && s.Thinking.Type != ThinkingDisabled
	if t := s.Thinking; t != nil {
		if err := only("thinking", anthropic, "anthropic"); err != nil {
			return err
		}
		switch t.Type {
		case ThinkingAdaptive, ThinkingEnabled, ThinkingDisabled:
		default:
			return refuse("thinking.type", "must be \"adaptive\", \"enabled\" or \"disabled\", not %q", t.Type)
		}
		modes := ThinkingModes(model)
		if t.Type != ThinkingDisabled && !slices.Contains(modes, t.Type) {
			if t.Type == ThinkingEnabled {
				return refuse("thinking.type", "model %q takes only adaptive thinking ({\"type\":\"adaptive\"} with effort); it refuses budget_tokens", model)
			}
			return refuse("thinking.type", "model %q does not take adaptive thinking; use {\"type\":\"enabled\",\"budget_tokens\":N}", model)
		}
		switch {
		case t.Type == ThinkingEnabled:
			if t.BudgetTokens < MinThinkingBudget {
				return refuse("thinking.budget_tokens", "must be at least %d, not %d", MinThinkingBudget, t.BudgetTokens)
			}
			if t.BudgetTokens >= int64(maxTokens) && !s.interleaved() {
				return refuse("thinking.budget_tokens", "must be below max_tokens (%d), not %d, unless the %s beta is in headers.anthropic-beta", maxTokens, t.BudgetTokens, InterleavedThinkingBeta)
			}
		case t.BudgetTokens != 0:
			return refuse("thinking.budget_tokens", "goes only with type \"enabled\"")
		}
		if t.Display != "" {
			if t.Type == ThinkingDisabled {
				return refuse("thinking.display", "goes only with thinking on")
			}
			if t.Display != "summarized" && t.Display != "omitted" {
				return refuse("thinking.display", "must be \"summarized\" or \"omitted\", not %q", t.Display)
			}
		}
	}
	if s.Effort != "" {
		if err := only("effort", anthropic, "anthropic"); err != nil {
			return err
		}
		if !slices.Contains([]string{"low", "medium", "high", "xhigh", "max"}, s.Effort) {
			return refuse("effort", "must be \"low\", \"medium\", \"high\", \"xhigh\" or \"max\", not %q", s.Effort)
		}
	}
	reasoning := s.ReasoningEffort != ""
	if reasoning {
		if err := only("reasoning_effort", !anthropic, "openai"); err != nil {
			return err
		}
		if !slices.Contains([]string{"none", "minimal", "low", "medium", "high", "xhigh"}, s.ReasoningEffort) {
			return refuse("reasoning_effort", "must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" or \"xhigh\", not %q", s.ReasoningEffort)
		}
	}
	adaptiveOnly := anthropic && slices.Equal(ThinkingModes(model), []string{ThinkingAdaptive})
	reasoningModel := !anthropic && (reasoning || ReasoningModel(model))
	if v := s.Temperature; v != nil {
		top := 2.0
		if anthropic {
			top = 1
		}
		switch {
		case math.IsNaN(*v) || *v < 0 || *v > top:
			return refuse("temperature", "must be between 0 and %g", top)
		case adaptiveOnly:
			return refuse("temperature", "model %q takes no sampling settings", model)
		case thinking && *v != 1:
			return refuse("temperature", "must be 1 (or unset) with thinking on")
		case reasoningModel && *v != 1:
			return refuse("temperature", "a reasoning model takes only the default (1, or unset)")
		}
	}
	if v := s.TopP; v != nil {
		switch {
		case math.IsNaN(*v) || *v < 0 || *v > 1:
			return refuse("top_p", "must be between 0 and 1")
		case adaptiveOnly:
			return refuse("top_p", "model %q takes no sampling settings", model)
		case thinking && *v < 0.95:
			return refuse("top_p", "must be between 0.95 and 1 with thinking on")
		case reasoningModel && *v != 1:
			return refuse("top_p", "a reasoning model takes only the default (1, or unset)")
		}
	}
	if v := s.TopK; v != nil {
		if err := only("top_k", anthropic, "anthropic"); err != nil {
			return err
		}
		switch {
		case *v < 1:
			return refuse("top_k", "must be at least 1")
		case adaptiveOnly:
			return refuse("top_k", "model %q takes no sampling settings", model)
		case thinking:
			return refuse("top_k", "must be unset with thinking on")
		}
	}
	if c := s.ToolChoice; c != "" {
		name, forced := strings.CutPrefix(c, "tool:")
		switch {
		case forced && strings.TrimSpace(name) == "":
			return refuse("tool_choice", "\"tool:\" must name a tool")
		case !forced && !slices.Contains([]string{"auto", "none", "any", "required"}, c):
			return refuse("tool_choice", "must be \"auto\", \"none\", \"any\", \"required\" or \"tool:<name>\", not %q", c)
		case thinking && (forced || c == "any" || c == "required"):
			return refuse("tool_choice", "with thinking on only \"auto\" or \"none\" are allowed, not %q", c)
		}
	}
	if t := s.ServiceTier; t != "" {
		tiers := []string{"auto", "default", "flex", "priority", "scale"}
		if anthropic {
			tiers = []string{"auto", "standard_only"}
		}
		if !slices.Contains(tiers, t) {
			return refuse("service_tier", "must be one of %s for %s, not %q", strings.Join(tiers, ", "), kind, t)
		}
	}
	if len(s.Stop) > 0 {
		if !anthropic && len(s.Stop) > 4 {
			return refuse("stop", "takes at most 4 sequences for openai")
		}
		for _, x := range s.Stop {
			if x == "" {
				return refuse("stop", "must not hold an empty sequence")
			}
		}
	}
	for k, v := range s.Headers {
		if !ValidHeaderName(k) {
			return refuse("headers", "%q is not a valid header name", k)
		}
		if slices.Contains(reservedHeaders, http.CanonicalHeaderKey(k)) {
			return refuse("headers", "%q is set by the server and may not be replaced", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return refuse("headers", "the value of %q holds a control character", k)
		}
	}
	return nil
}

// ValidHeaderName reports whether s is an RFC 9110 token, as a header
// name must be.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// bodyFields are the settings' request-body fields, in a fixed order, for
// an endpoint of kind; tools reports whether the request declares tools
// (tool_choice and parallel_tool_calls go only with tools).
func (s Settings) bodyFields(kind string, tools bool) []field {
	var out []field
	add := func(k string, v any) { out = append(out, field{k, v}) }
	if kind == KindAnthropic {
		if t := s.Thinking; t != nil && t.Type != ThinkingDisabled {
			th := map[string]any{"type": t.Type}
			if t.Type == ThinkingEnabled {
				th["budget_tokens"] = t.BudgetTokens
			}
			if t.Display != "" {
				th["display"] = t.Display
			}
			add("thinking", th)
		}
		if s.Effort != "" {
			add("output_config", map[string]any{"effort": s.Effort})
		}
	} else if s.ReasoningEffort != "" {
		add("reasoning_effort", s.ReasoningEffort)
	}
	if s.Temperature != nil {
		add("temperature", *s.Temperature)
	}
	if s.TopP != nil {
		add("top_p", *s.TopP)
	}
	if s.TopK != nil && kind == KindAnthropic {
		add("top_k", *s.TopK)
	}
	if tools {
		if kind == KindAnthropic {
			if c := anthropicToolChoice(s.ToolChoice, s.ParallelToolCalls); c != nil {
				add("tool_choice", c)
			}
		} else {
			if c := openAIToolChoice(s.ToolChoice); c != nil {
				add("tool_choice", c)
			}
			if s.ParallelToolCalls != nil {
				add("parallel_tool_calls", *s.ParallelToolCalls)
			}
		}
	}
	if s.ServiceTier != "" {
		add("service_tier", s.ServiceTier)
	}
	if len(s.Stop) > 0 {
		if kind == KindAnthropic {
			add("stop_sequences", s.Stop)
		} else {
			add("stop", s.Stop)
		}
	}
	return out
}

type field struct {
	key   string
	value any
}

func anthropicToolChoice(c string, parallel *bool) map[string]any {
	if c == "" && parallel == nil {
		return nil
	}
	out := map[string]any{"type": "auto"}
	switch name, forced := strings.CutPrefix(c, "tool:"); {
	case forced:
		out["type"], out["name"] = "tool", name
	case c == "required":
		out["type"] = "any"
	case c != "":
		out["type"] = c
	}
	if parallel != nil && !*parallel && out["type"] != "none" {
		out["disable_parallel_tool_use"] = true
	}
	return out
}

func openAIToolChoice(c string) any {
	switch name, forced := strings.CutPrefix(c, "tool:"); {
	case c == "":
		return nil
	case forced:
		return map[string]any{"type": "function", "function": map[string]any{"name": name}}
	case c == "any":
		return "required"
	default:
		return c
	}
}

// withSettings splices the settings' fields into an encoded request body
// before its closing brace; with none it returns payload unchanged, so a
// request without settings is byte for byte what it was before settings
// existed. An OpenAI reasoning request sends max_completion_tokens, which
// reasoning models require, instead of max_tokens.
func withSettings(kind string, s Settings, tools bool, payload []byte) ([]byte, error) {
	fields := s.bodyFields(kind, tools)
	if len(fields) == 0 {
		return payload, nil
	}
	payload = bytes.TrimRight(payload, " \n")
	if len(payload) < 2 || payload[len(payload)-1] != '}' {
		return nil, errors.New("request body is not a JSON object")
	}
	if kind == KindOpenAI && s.ReasoningEffort != "" {
		payload = renameMaxTokens(payload)
	}
	out := append([]byte(nil), payload[:len(payload)-1]...)
	for _, f := range fields {
		v, err := marshalJSON(f.value)
		if err != nil {
			return nil, err
		}
		k, _ := marshalJSON(f.key)
		out = append(out, ',')
		out = append(out, k...)
		out = append(out, ':')
		out = append(out, v...)
	}
	return append(out, '}'), nil
}

// renameMaxTokens renames the body's top-level max_tokens (the second
// field of every body this package encodes, after the model).
func renameMaxTokens(payload []byte) []byte {
	i := bytes.Index(payload, []byte(`,"max_tokens":`))
	if i < 0 {
		return payload
	}
	out := make([]byte, 0, len(payload)+11)
	out = append(out, payload[:i]...)
	out = append(out, `,"max_completion_tokens":`...)
	return append(out, payload[i+len(`,"max_tokens":`):]...)
}

// ParseOverrides decodes a profile's model_settings: an object of
// settings by provider entry name. Shape errors are *SettingError with
// Malformed set, the field prefixed with the entry's name.
func ParseOverrides(raw json.RawMessage) (map[string]Settings, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var byName map[string]json.RawMessage
	if t[0] != '{' || json.Unmarshal(t, &byName) != nil {
		return nil, &SettingError{Reason: "must be an object of settings by provider entry name", Malformed: true}
	}
	out := make(map[string]Settings, len(byName))
	for name, r := range byName {
		s, err := ParseSettings(r)
		if err != nil {
			var se *SettingError
			if errors.As(err, &se) {
				return nil, &SettingError{Field: joinField(name, se.Field), Reason: se.Reason, Malformed: true}
			}
			return nil, err
		}
		out[name] = s
	}
	return out, nil
}

func joinField(a, b string) string {
	if b == "" {
		return a
	}
	return a + "." + b
}

// Shown is s as a provider.request event shows it: header values other
// than the beta lists are masked, since a header may carry a credential.
func (s Settings) Shown() Settings {
	if len(s.Headers) == 0 {
		return s
	}
	h := make(map[string]string, len(s.Headers))
	for k, v := range s.Headers {
		if strings.EqualFold(k, "anthropic-beta") || strings.EqualFold(k, "openai-beta") {
			h[k] = v
		} else {
			h[k] = "••••••••" // config.Redacted
		}
	}
	s.Headers = h
	return s
}
