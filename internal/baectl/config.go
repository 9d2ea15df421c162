package baectl

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// configDoc is GET /admin/v1/config. Telemetry stays generic: it mirrors the
// [telemetry] table, whose keys are the server's to evolve.
type configDoc struct {
	MCP *struct {
		Servers []struct {
			Name      string   `json:"name"`
			Transport string   `json:"transport"`
			Command   *string  `json:"command"`
			Args      []string `json:"args"`
			URL       *string  `json:"url"`
		} `json:"servers"`
	} `json:"mcp"`
	Providers *struct {
		Entries []providerEntry `json:"entries"`
	} `json:"providers"`
	Telemetry map[string]json.RawMessage `json:"telemetry"`
}

func getConfigCmd(fs *pflag.FlagSet) runFunc {
	asJSON := fs.Bool("json", false, "print the raw JSON document")
	return func(ctx context.Context, e *invocation, _ []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		var doc configDoc
		raw, err := c.getInto(ctx, "/admin/v1/config", nil, &doc)
		if err != nil {
			return err
		}
		if doc.MCP == nil || doc.Providers == nil {
			return fmt.Errorf("%w: /admin/v1/config lacks mcp or providers", errVersionSkew)
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		w := e.stdout
		fmt.Fprintln(w, "mcp servers:")
		if len(doc.MCP.Servers) == 0 {
			fmt.Fprintln(w, "  (none)")
		} else {
			rows := make([][]string, 0, len(doc.MCP.Servers))
			for _, s := range doc.MCP.Servers {
				target := strOr(s.URL, "")
				if s.Command != nil && *s.Command != "" {
					target = strings.Join(append([]string{*s.Command}, s.Args...), " ")
				}
				rows = append(rows, []string{s.Name, s.Transport, target})
			}
			if err := indentedTable(w, "  ", []string{"NAME", "TRANSPORT", "COMMAND/URL"}, rows); err != nil {
				return err
			}
		}
		fmt.Fprintln(w, "\nproviders:")
		if len(doc.Providers.Entries) == 0 {
			fmt.Fprintln(w, "  (none)")
		} else {
			rows := make([][]string, 0, len(doc.Providers.Entries))
			for _, p := range doc.Providers.Entries {
				rows = append(rows, []string{p.Name, p.Provider, p.Model, p.BaseURL})
			}
			if err := indentedTable(w, "  ", []string{"NAME", "PROVIDER", "MODEL", "BASE_URL"}, rows); err != nil {
				return err
			}
		}
		fmt.Fprintln(w, "\ntelemetry:")
		if len(doc.Telemetry) == 0 {
			fmt.Fprintln(w, "  (not reported)")
			return nil
		}
		keys := make([]string, 0, len(doc.Telemetry))
		for k := range doc.Telemetry {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		kv := make([][2]string, 0, len(keys))
		for _, k := range keys {
			kv = append(kv, [2]string{k, compactJSON(doc.Telemetry[k])})
		}
		return fields(w, "  ", kv)
	}
}
