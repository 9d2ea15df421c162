package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bae-go/bae-go/cmdtemplate"
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
// placeholder becomes a required string input, substituted as one
// single-quoted word, so a value can never become a second command. The
// template is refused here when a placeholder sits where single quotes do
// not protect it (inside quotes, for one: write `echo {msg}`, not
// `echo "{msg}"`), and a call is refused, in band, when a value beginning
// with "-" would start a word the command could read as an option; put a
// "--" word before such a placeholder to accept those values
// (`sort -- {file}`). See package cmdtemplate for the rules.
func RunShellNamed(name, description, template string, ex Executor, render Render) (sdk.Tool, error) {
	tpl, err := cmdtemplate.Parse(template)
	if err != nil {
		return sdk.Tool{}, err
	}
	params := tpl.Params()
	props := map[string]any{}
	for _, p := range params {
		props[p] = map[string]any{"type": "string", "description": fmt.Sprintf("Value for {%s} (passed as one literal argument).", p)}
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
			cmd, err := tpl.Expand(values)
			if _, refused := errors.AsType[*cmdtemplate.ValueError](err); refused {
				return inBand("%s: %v", name, err), nil
			}
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

// ShellQuote wraps s in single quotes for a POSIX shell, so it is one
// literal word (cmdtemplate.Quote).
func ShellQuote(s string) string { return cmdtemplate.Quote(s) }
