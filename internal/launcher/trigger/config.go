// Package trigger is baeapi: POST /agents/{name}/trigger runs an agent of
// bae-api.toml (or bae-app.toml) through the Launch workflow and streams its
// output back; the same server can put a web app in front of the agents.
package trigger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bae-go/bae-go/internal/launcher"
)

// Agent is one [[agents]] entry of bae-api.toml / bae-app.toml.
type Agent struct {
	Name          string            `toml:"name"`
	Command       string            `toml:"command"`
	Args          []string          `toml:"args"`
	WorkingDir    string            `toml:"working_dir"`
	Env           map[string]string `toml:"env"`
	RequestSchema map[string]any    `toml:"request_schema"`
	EnvTemplate   []EnvTemplate     `toml:"env_template"`
	ArgTemplate   []ArgTemplate     `toml:"arg_template"`

	// Presentation, used by the web app only.
	DisplayName    *string  `toml:"display_name"`
	Description    *string  `toml:"description"`
	Icon           *string  `toml:"icon"`
	ChatInputField *string  `toml:"chat_input_field"`
	Prompts        []Prompt `toml:"prompts"`

	schema *jsonschema.Schema
}

// EnvTemplate copies request field Field into the child's variable Env.
type EnvTemplate struct {
	Field string `toml:"field"`
	Env   string `toml:"env"`
}

// ArgTemplate appends Flag and request field Field's value to the args.
type ArgTemplate struct {
	Field string `toml:"field"`
	Flag  string `toml:"flag"`
}

// Prompt is a ready-made prompt button of the web app.
type Prompt struct {
	Label  string `toml:"label" json:"label"`
	Prompt string `toml:"prompt" json:"prompt"`
}

// ServerTable is the [server] table.
type ServerTable struct {
	Addr string `toml:"addr"`
}

// File is bae-api.toml (bae-app.toml is the same schema).
type File struct {
	Server ServerTable `toml:"server"`
	Agents []Agent     `toml:"agents"`
}

// Load reads and checks the file at path. A missing file gives no agents and
// found false. A file that exists but cannot be read is a runtime error
// (exit 1, as BAE's baeapi has it); every other problem is a
// *launcher.UsageError (exit 2) saying "malformed config: <path>: …", BAE's
// words first.
func Load(path string) (f File, found bool, err error) {
	data, found, err := launcher.ReadFile(path)
	if err != nil {
		return File{}, true, fmt.Errorf("cannot read config file: %w", err)
	}
	if !found {
		return File{}, false, nil
	}
	f, err = parse(path, data)
	return f, true, launcher.Prefixed(err, "malformed config: ")
}

func parse(path string, data []byte) (f File, err error) {
	if err := launcher.DecodeConfig(path, data, &f, "agents.request_schema"); err != nil {
		return File{}, err
	}
	names := make([]string, len(f.Agents))
	for i, a := range f.Agents {
		names[i] = a.Name
	}
	if err := launcher.CheckNames(path, names); err != nil {
		return File{}, err
	}
	for i := range f.Agents {
		a := &f.Agents[i]
		if strings.TrimSpace(a.Command) == "" {
			return File{}, &launcher.UsageError{Msg: fmt.Sprintf("%s: agent %q has no command", path, a.Name)}
		}
		if err := launcher.CheckEnvMap(path, a.Name, a.Env); err != nil {
			return File{}, err
		}
		for _, t := range a.EnvTemplate {
			if err := launcher.CheckEnvRefs(t.Env); err != nil {
				return File{}, &launcher.UsageError{Msg: fmt.Sprintf("%s: agent %q env_template %q: %v", path, a.Name, t.Field, err)}
			}
		}
		for _, t := range a.ArgTemplate {
			if err := launcher.CheckEnvRefs(t.Flag); err != nil {
				return File{}, &launcher.UsageError{Msg: fmt.Sprintf("%s: agent %q arg_template %q: %v", path, a.Name, t.Field, err)}
			}
		}
		if a.RequestSchema != nil {
			s, err := compileSchema(a.RequestSchema)
			if err != nil {
				return File{}, &launcher.UsageError{Msg: fmt.Sprintf("%s: agent %q has an invalid request_schema (JSON Schema): %v", path, a.Name, err)}
			}
			a.schema = s
		}
	}
	return f, nil
}

// compileSchema compiles a schema written as a TOML table, once, at start.
func compileSchema(doc map[string]any) (*jsonschema.Schema, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("request_schema.json", v); err != nil {
		return nil, err
	}
	return c.Compile("request_schema.json")
}

// chatInputField is the request field the web app's text box fills.
func (a *Agent) chatInputField() string {
	if a.ChatInputField != nil {
		return *a.ChatInputField
	}
	return "prompt"
}
