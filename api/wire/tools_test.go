package wire

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func decls(t *testing.T, raw string) []ToolDecl {
	t.Helper()
	var out []ToolDecl
	require.NoError(t, json.Unmarshal([]byte(raw), &out))
	return out
}

func TestCheckToolDecls(t *testing.T) {
	var many strings.Builder
	many.WriteString("[")
	for i := 0; i <= MaxTools; i++ {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `{"name":"t%d"}`, i)
	}
	many.WriteString("]")
	bad := map[string]string{
		"no name":             `[{"description":"x"}]`,
		"blank name":          `[{"name":" "}]`,
		"name with spaces":    `[{"name":"get time"}]`,
		"name too long":       `[{"name":"` + strings.Repeat("a", 65) + `"}]`,
		"duplicate":           `[{"name":"a"},{"name":"a"}]`,
		"schema not object":   `[{"name":"a","input_schema":5}]`,
		"schema array":        `[{"name":"a","input_schema":[]}]`,
		"schema string":       `[{"name":"a","input_schema":"{}"}]`,
		"schema other type":   `[{"name":"a","input_schema":{"type":"string"}}]`,
		"schema too deep":     `[{"name":"a","input_schema":{"properties":` + strings.Repeat(`{"a":`, 200) + `{}` + strings.Repeat("}", 200) + `}}]`,
		"too many tools":      many.String(),
		"description too big": `[{"name":"a","description":"` + strings.Repeat("d", MaxToolDescriptionBytes+1) + `"}]`,
	}
	for name, raw := range bad {
		t.Run(name, func(t *testing.T) {
			err := CheckToolDecls(decls(t, raw))
			require.Error(t, err)
			assert.Less(t, len(err.Error()), 300)
		})
	}
	// Duplicates count across a client's lists (tools and sandbox_tools
	// are advertised together).
	require.Error(t, CheckToolDecls(decls(t, `[{"name":"a"}]`), decls(t, `[{"name":"a"}]`)))

	for _, raw := range []string{
		`[]`,
		`[{"name":"get_time"}]`,
		`[{"name":"get-time_2","description":"d","input_schema":{}}]`,
		`[{"name":"a","input_schema":null}]`,
		`[{"name":"a","input_schema":{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}}]`,
	} {
		assert.NoError(t, CheckToolDecls(decls(t, raw)), raw)
	}
}

func FuzzCheckToolDecls(f *testing.F) {
	for _, s := range []string{
		`[{"name":"get_time","input_schema":{"type":"object","properties":{}}}]`,
		`[{"name":"a"},{"name":"a"}]`,
		`[{"name":"a","input_schema":5}]`,
		`[{"name":"a","input_schema":{"type":["object"]}}]`,
		`[{"name":"a b"}]`,
		`[{"name":""}]`,
		`[{"name":"a","input_schema":{"properties":{"x":{"items":[[[[[[[[[[]]]]]]]]]]}}}}]`,
		`[{"name":"\u00e9"}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var list []ToolDecl
		if json.Unmarshal(raw, &list) != nil {
			return
		}
		if CheckToolDecls(list) != nil {
			return
		}
		assert.LessOrEqual(t, len(list), MaxTools)
		seen := map[string]bool{}
		for _, d := range list {
			assert.Regexp(t, `^[A-Za-z0-9_-]{1,64}$`, d.Name)
			assert.False(t, seen[d.Name], "duplicate %q", d.Name)
			seen[d.Name] = true
			if len(d.InputSchema) > 0 && string(d.InputSchema) != "null" {
				assert.True(t, IsObject(d.InputSchema), "schema %s", d.InputSchema)
				assert.LessOrEqual(t, Depth(d.InputSchema), MaxNestingDepth)
			}
		}
	})
}
