package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/bae-go/bae-go/sdk"
)

// Render turns a command's result into tool_result content (see
// sdk.ToolHandler for the accepted types). nil renders the result as JSON
// {"stdout","stderr","exit_code"}.
type Render func(sdk.ExecResult) any

// RunShellCommandName is the name of the unconstrained shell tool.
const RunShellCommandName = "run_shell_command"

func shellCommandSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"command": map[string]any{"type": "string", "description": "The shell command to run."},
		},
		"required":             []string{"command"},
		"additionalProperties": false,
	}
}

const shellCommandDescription = "Run an arbitrary shell command inside the configured sandbox and return its stdout, stderr and exit code."

// RunShellCommand is run_shell_command: the model may run any command
// through ex. The executor (its image, or the server's sandbox) is the
// whole security boundary; prefer RunShellNamed to allow one command only.
func RunShellCommand(ex Executor, render Render) sdk.Tool {
	return sdk.Tool{
		Name:        RunShellCommandName,
		Description: shellCommandDescription,
		InputSchema: shellCommandSchema(),
		Handler: func(ctx context.Context, raw json.RawMessage) (any, error) {
			var in struct {
				Command *string `json:"command"`
			}
			if err := json.Unmarshal(raw, &in); err != nil || in.Command == nil {
				return nil, fmt.Errorf("%s requires a string command", RunShellCommandName)
			}
			return runRendered(ctx, ex, *in.Command, render)
		},
	}
}

// RemoteShellCommandSpec declares run_shell_command for Auto-mode remote
// dispatch: pass it to sdk.WithSandboxTool and the server runs it in the
// session's remote sandbox without pausing the turn.
func RemoteShellCommandSpec() sdk.ToolSpec {
	return sdk.ToolSpec{Name: RunShellCommandName, Description: shellCommandDescription, InputSchema: shellCommandSchema()}
}

// RunShellNamed is a tool that runs one command template. Each {param}
// placeholder becomes a required string input, shell-quoted before it is
// substituted, so a value can never become a second command.
func RunShellNamed(name, description, template string, ex Executor, render Render) (sdk.Tool, error) {
	params, err := templateParams(template)
	if err != nil {
		return sdk.Tool{}, err
	}
	props := map[string]any{}
	for _, p := range params {
		props[p] = map[string]any{"type": "string", "description": fmt.Sprintf("Value for {%s} (shell-quoted before use).", p)}
	}
	schema := map[string]any{"type": "object", "properties": props, "required": params, "additionalProperties": false}
	return sdk.Tool{
		Name: name, Description: description, InputSchema: schema,
		Handler: func(ctx context.Context, raw json.RawMessage) (any, error) {
			var in map[string]any
			if err := json.Unmarshal(raw, &in); err != nil {
				return nil, fmt.Errorf("%s: input must be an object: %w", name, err)
			}
			values := map[string]string{}
			for _, p := range params {
				v, ok := in[p].(string)
				if !ok {
					return nil, fmt.Errorf("%s: missing required string parameter %q", name, p)
				}
				values[p] = v
			}
			cmd, err := interpolate(template, values)
			if err != nil {
				return nil, err
			}
			return runRendered(ctx, ex, cmd, render)
		},
	}, nil
}

func runRendered(ctx context.Context, ex Executor, cmd string, render Render) (any, error) {
	res, err := ex.Exec(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if render != nil {
		return render(res), nil
	}
	return res, nil // JSON-encoded by the harness
}

// ShellQuote wraps s in single quotes for a POSIX shell, so it is always
// one literal argument.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// templateParams lists a template's {name} placeholders, in order, once
// each. Names are identifiers; anything else is an error, so a typo cannot
// silently become literal text.
func templateParams(template string) ([]string, error) {
	var out []string
	err := scanTemplate(template, func(lit string) {}, func(name string) error {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
		return nil
	})
	return out, err
}

// interpolate substitutes quoted values in one left-to-right pass, so a
// substituted value is never re-read as a placeholder.
func interpolate(template string, values map[string]string) (string, error) {
	var sb strings.Builder
	err := scanTemplate(template, func(lit string) { sb.WriteString(lit) }, func(name string) error {
		v, ok := values[name]
		if !ok {
			return fmt.Errorf("missing value for {%s}", name)
		}
		sb.WriteString(ShellQuote(v))
		return nil
	})
	return sb.String(), err
}

func scanTemplate(template string, literal func(string), placeholder func(string) error) error {
	rest := template
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			if strings.Contains(rest, "}") {
				return fmt.Errorf("command template %q: unmatched }", template)
			}
			literal(rest)
			return nil
		}
		if strings.Contains(rest[:i], "}") {
			return fmt.Errorf("command template %q: unmatched }", template)
		}
		literal(rest[:i])
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return fmt.Errorf("command template %q: unterminated {", template)
		}
		name := rest[i+1 : i+j]
		if !isIdent(name) {
			return fmt.Errorf("command template %q: placeholder {%s} is not an identifier", template, name)
		}
		if err := placeholder(name); err != nil {
			return err
		}
		rest = rest[i+j+1:]
	}
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r != '_' && !(r >= 'a' && r <= 'z') && !(r >= 'A' && r <= 'Z') && !(i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
