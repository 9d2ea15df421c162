package baectl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

func rewindSessionCmd(fs *pflag.FlagSet) runFunc {
	turn := fs.String("turn", "", "rewind to before this `TURN_ID`")
	before := fs.String("before-event", "", "rewind to before this `EVENT_ID` (an event inside a turn rewinds to before that turn)")
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, args []string) error {
		if (*turn == "") == (*before == "") {
			return errors.New("give exactly one of --turn and --before-event")
		}
		c, err := e.admin()
		if err != nil {
			return err
		}
		body := map[string]any{}
		if *turn != "" {
			body["turn_id"] = *turn
		} else {
			body["before_event_id"] = *before
		}
		var res struct {
			EventID   string   `json:"event_id"`
			ToSeq     int64    `json:"to_event_seq"`
			TurnIDs   []string `json:"turn_ids"`
			ToolCalls []struct {
				TurnID    string `json:"turn_id"`
				ToolUseID string `json:"tool_use_id"`
				Name      string `json:"name"`
				Dispatch  string `json:"dispatch"`
			} `json:"tool_calls"`
			Interrupted     string `json:"interrupted_turn_id"`
			ContextRestored bool   `json:"context_restored"`
		}
		raw, err := c.send(ctx, http.MethodPost, "/admin/v1/sessions/"+url.PathEscape(args[0])+"/rewind", body, &res)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		calls := make([]string, 0, len(res.ToolCalls))
		for _, tc := range res.ToolCalls {
			calls = append(calls, fmt.Sprintf("%s (%s, %s)", tc.Name, tc.Dispatch, tc.ToolUseID))
		}
		if err := fields(e.stdout, "", [][2]string{
			{"event_id", res.EventID},
			{"last_kept_event_seq", strconv.FormatInt(res.ToSeq, 10)},
			{"rewound_turns", strings.Join(res.TurnIDs, ", ")},
			{"interrupted_turn", res.Interrupted},
			{"context_restored", strconv.FormatBool(res.ContextRestored)},
			{"tool_calls_not_undone", strings.Join(calls, "; ")},
		}); err != nil {
			return err
		}
		if len(res.ToolCalls) > 0 {
			fmt.Fprintln(e.stdout, "The tool calls above ran; what they did in a sandbox or an MCP server is not undone.")
		}
		return nil
	}
}
