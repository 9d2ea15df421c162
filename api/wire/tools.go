package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/bae-go/bae-go/tooldecl"
)

// Bounds on one client's tool declarations (tools, sandbox_tools and
// subagent_tools together). Providers refuse a tool list with a bad name,
// a duplicate or a non-object schema, so each is refused at declaration.
const (
	MaxTools                = 128
	MaxToolDescriptionBytes = 16 << 10
	MaxToolSchemaBytes      = 64 << 10
)

// toolName is the name rule shared by the providers bae-go speaks to.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ToolDecl is a declared client-side (or Auto-mode sandbox) tool.
type ToolDecl = tooldecl.Decl

// CheckToolDecls validates one client's declaration lists as a whole: every
// name matches ^[A-Za-z0-9_-]{1,64}$ and appears once across all lists;
// input_schema, when given, is a JSON object whose "type", if any, is
// "object", nested at most MaxNestingDepth deep; descriptions and schemas
// are bounded in size.
func CheckToolDecls(lists ...[]ToolDecl) error {
	seen := map[string]bool{}
	total := 0
	for _, list := range lists {
		for _, t := range list {
			total++
			if total > MaxTools {
				return fmt.Errorf("at most %d tools may be declared", MaxTools)
			}
			if err := CheckTool(t.Name, t.Description, t.InputSchema); err != nil {
				return err
			}
			if seen[t.Name] {
				return fmt.Errorf("tool %q is declared more than once", t.Name)
			}
			seen[t.Name] = true
		}
	}
	return nil
}

// CheckTool validates one declaration's name, description and schema.
func CheckTool(name string, description *string, schema json.RawMessage) error {
	if !toolName.MatchString(name) {
		if name == "" {
			return errors.New(`every tool requires a non-empty "name"`)
		}
		return fmt.Errorf("tool name %q must be 1 to 64 letters, digits, '_' or '-'", clip(name))
	}
	if description != nil && len(*description) > MaxToolDescriptionBytes {
		return fmt.Errorf("tool %q: description exceeds %d bytes", name, MaxToolDescriptionBytes)
	}
	// Declarations are stored as jsonb, which cannot hold U+0000.
	if description != nil && strings.ContainsRune(*description, 0) {
		return fmt.Errorf("tool %q: description must not contain NUL characters", name)
	}
	if bytes.Contains(bytes.ToLower(schema), []byte(`\u0000`)) {
		return fmt.Errorf("tool %q: input_schema must not contain NUL characters", name)
	}
	if len(schema) == 0 || string(schema) == "null" {
		return nil // absent: advertised as an empty object schema
	}
	if len(schema) > MaxToolSchemaBytes {
		return fmt.Errorf("tool %q: input_schema exceeds %d bytes", name, MaxToolSchemaBytes)
	}
	if Depth(schema) > MaxNestingDepth {
		return fmt.Errorf("tool %q: input_schema nests deeper than %d levels", name, MaxNestingDepth)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(schema, &obj) != nil || obj == nil {
		return fmt.Errorf("tool %q: input_schema must be a JSON object", name)
	}
	if typ, ok := obj["type"]; ok {
		var s string
		if json.Unmarshal(typ, &s) != nil || s != "object" {
			return fmt.Errorf(`tool %q: input_schema "type" must be "object"`, name)
		}
	}
	return nil
}
