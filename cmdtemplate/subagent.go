package cmdtemplate

import (
	"fmt"
	"regexp"
)

// How a subagent CLI receives its prompt (a declaration's prompt_via).
const (
	PromptViaStdin = "stdin"
	PromptViaArg   = "arg"
)

// ModelPattern is what a subagent's model name must match: the names of
// Anthropic, OpenAI, Bedrock ("anthropic.claude-…-v1:0"), Vertex
// ("…@20241022"), Ollama ("qwen2.5-coder:7b") and router
// ("openrouter/…/…:free") models, and nothing a shell or a CLI's option
// parser reads specially: no blank, quote or metacharacter, and no leading
// "-".
var ModelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$`)

// CheckModel refuses a model name that does not match ModelPattern.
func CheckModel(model string) error {
	if !ModelPattern.MatchString(model) {
		return fmt.Errorf("model %q is not a model name: it must match %s", model, ModelPattern)
	}
	return nil
}

// ParseSubagent parses a subagent CLI's command template: its only
// placeholders are {model} and {prompt}, and {prompt} appears exactly once
// when the prompt is passed as an argument (promptVia "arg"), never when it
// is piped to stdin ("stdin").
func ParseSubagent(src, promptVia string) (*Template, error) {
	if promptVia != PromptViaStdin && promptVia != PromptViaArg {
		return nil, fmt.Errorf(`prompt_via must be "stdin" or "arg", got %q`, promptVia)
	}
	t, err := Parse(src)
	if err != nil {
		return nil, err
	}
	prompts := 0
	for _, p := range t.parts {
		switch p.name {
		case "", "model":
		case "prompt":
			prompts++
		default:
			return nil, fmt.Errorf("command template %q: placeholder {%s} is not allowed (only {model} and {prompt})", src, p.name)
		}
	}
	switch {
	case promptVia == PromptViaArg && prompts != 1:
		return nil, fmt.Errorf("command template %q: prompt_via arg needs {prompt} exactly once", src)
	case promptVia == PromptViaStdin && prompts != 0:
		return nil, fmt.Errorf("command template %q: prompt_via stdin must not put {prompt} in the template", src)
	}
	return t, nil
}

// ExpandSubagent checks model against ModelPattern and expands a template
// from ParseSubagent. prompt is substituted only if the template has
// {prompt}.
func (t *Template) ExpandSubagent(model, prompt string) (string, error) {
	if err := CheckModel(model); err != nil {
		return "", err
	}
	return t.Expand(map[string]string{"model": model, "prompt": prompt})
}
