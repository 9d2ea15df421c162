package trigger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/bae-go/bae-go/internal/launcher"
)

// badRequest is a body the agent refuses: 400, nothing spawned.
type badRequest struct{ detail string }

func (e *badRequest) Error() string { return e.detail }

// parseBody reads a trigger's body (empty is {}) and checks it against the
// agent's schema, naming every failing instance path.
func (a *Agent) parseBody(body []byte) (any, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return nil, &badRequest{detail: "request body is not valid JSON: " + err.Error()}
	}
	if a.schema == nil {
		return v, nil
	}
	err = a.schema.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return nil, &badRequest{detail: "request body failed schema validation: " + strings.Join(failures(ve), "; ")}
	}
	if err != nil {
		return nil, &badRequest{detail: err.Error()}
	}
	return v, nil
}

func failures(ve *jsonschema.ValidationError) []string {
	var out []string
	var walk func(u jsonschema.OutputUnit)
	walk = func(u jsonschema.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			path := u.InstanceLocation
			if req, ok := u.Error.Kind.(*kind.Required); ok && path == "" && len(req.Missing) > 0 {
				for _, m := range req.Missing {
					out = append(out, fmt.Sprintf("/%s: %q is a required property", m, m))
				}
				return
			}
			if path == "" {
				path = "<root>"
			}
			out = append(out, path+": "+u.Error.String())
		}
		for _, c := range u.Errors {
			walk(c)
		}
	}
	walk(*ve.BasicOutput())
	if len(out) == 0 {
		out = append(out, ve.Error())
	}
	return out
}

// spec builds the child for a checked body: static env and the templates'
// own env/flag strings get their ${VAR}s resolved; values from the body are
// copied verbatim (a request is untrusted: resolving it would let any caller
// read the launcher's environment).
func (a *Agent) spec(body any, lookup func(string) (string, bool)) (launcher.Spec, error) {
	env, err := launcher.ResolveEnvMap(a.Env, lookup)
	if err != nil {
		return launcher.Spec{}, err
	}
	args := append([]string(nil), a.Args...)
	obj, _ := body.(map[string]any)
	for _, t := range a.EnvTemplate {
		v, ok := obj[t.Field]
		if !ok {
			continue
		}
		name, err := launcher.ResolveEnvRefs(t.Env, lookup)
		if err != nil {
			return launcher.Spec{}, err
		}
		env[name] = render(v)
	}
	for _, t := range a.ArgTemplate {
		v, ok := obj[t.Field]
		if !ok {
			continue
		}
		flag, err := launcher.ResolveEnvRefs(t.Flag, lookup)
		if err != nil {
			return launcher.Spec{}, err
		}
		args = append(args, flag, render(v))
	}
	return launcher.Spec{Name: a.Name, Command: a.Command, Args: args, Env: env, Dir: a.WorkingDir}, nil
}

// render is a body value as the child sees it: a string's own text, null as
// "", anything else as compact JSON.
func render(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
