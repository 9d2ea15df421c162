package baectl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// printJSON writes raw JSON indented, preserving the server's field order
// and values exactly (re-encoding via a map would reorder keys).
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("%w: %v", errVersionSkew, err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printItemsJSON prints auto-paginated items as one flat JSON array.
func printItemsJSON(w io.Writer, items []json.RawMessage) error {
	raw, err := json.Marshal(items)
	if err != nil {
		return fmt.Errorf("encode items: %w", err)
	}
	return printJSON(w, raw)
}

// table renders rows under upper-case headers in aligned columns.
func table(w io.Writer, headers []string, rows [][]string) error {
	return indentedTable(w, "", headers, rows)
}

// indentedTable is table with every line prefixed by indent.
func indentedTable(w io.Writer, indent string, headers []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, indent+strings.Join(headers, "\t"))
	for _, r := range rows {
		clean := make([]string, len(r))
		for i, c := range r {
			clean[i] = cell(c)
		}
		fmt.Fprintln(tw, indent+strings.Join(clean, "\t"))
	}
	return tw.Flush()
}

// cell keeps a value on one table line: tabs and newlines would break the
// column layout.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), " ")
}

// fields renders "  label: value" lines with aligned values.
func fields(w io.Writer, indent string, kv [][2]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, p := range kv {
		fmt.Fprintf(tw, "%s%s:\t%s\n", indent, p[0], p[1])
	}
	return tw.Flush()
}

// listOrNone renders a list field for humans.
func listOrNone(items []string) string {
	if len(items) == 0 {
		return "(none)"
	}
	return strings.Join(items, ", ")
}

func strOr(p *string, dflt string) string {
	if p == nil || *p == "" {
		return dflt
	}
	return *p
}

// truncate shortens s to n runes, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// decodeItems decodes raw list items into typed values for table output.
func decodeItems[T any](items []json.RawMessage) ([]T, error) {
	out := make([]T, 0, len(items))
	for _, it := range items {
		var v T
		if err := decode(it, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
