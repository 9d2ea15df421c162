package baectl

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spf13/pflag"
)

// forkRef is one side of a fork in the admin API's answers.
type forkRef struct {
	SessionID string `json:"session_id"`
	EventSeq  int64  `json:"event_seq"`
}

func forkSessionCmd(fs *pflag.FlagSet) runFunc {
	at := fs.String("at", "", "fork after this `EVENT_ID` (default: the latest event; an event inside a turn forks before that turn)")
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		body := map[string]any{"client_key_id": args[1]}
		if *at != "" {
			body["at_event_id"] = *at
		}
		var res struct {
			SessionID  string `json:"session_id"`
			SessionKey string `json:"session_key"`
			ForkedFrom struct {
				forkRef
				Moved bool `json:"moved_to_turn_start"`
			} `json:"forked_from"`
		}
		raw, err := c.send(ctx, http.MethodPost, "/admin/v1/sessions/"+url.PathEscape(args[0])+"/fork", body, &res)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		at := strconv.FormatInt(res.ForkedFrom.EventSeq, 10)
		if res.ForkedFrom.Moved {
			at += " (moved to the start of the turn the event was in)"
		}
		return fields(e.stdout, "", [][2]string{
			{"session_id", res.SessionID},
			{"session_key", res.SessionKey},
			{"forked_from", res.ForkedFrom.SessionID},
			{"last_inherited_event_seq", at},
		})
	}
}

func lineageCmd(fs *pflag.FlagSet) runFunc {
	asJSON := fs.Bool("json", false, "print the raw JSON document")
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		var l struct {
			ForkedFrom *forkRef  `json:"forked_from"`
			Forks      []forkRef `json:"forks"`
		}
		raw, err := c.getInto(ctx, "/admin/v1/sessions/"+url.PathEscape(args[0])+"/lineage", nil, &l)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		rows := [][]string{}
		if l.ForkedFrom != nil {
			rows = append(rows, []string{"forked from", l.ForkedFrom.SessionID, strconv.FormatInt(l.ForkedFrom.EventSeq, 10)})
		}
		for _, f := range l.Forks {
			rows = append(rows, []string{"fork", f.SessionID, strconv.FormatInt(f.EventSeq, 10)})
		}
		if len(rows) == 0 {
			fmt.Fprintf(e.stdout, "session %s has no forks and was not forked\n", args[0])
			return nil
		}
		return table(e.stdout, []string{"RELATION", "SESSION_ID", "LAST_INHERITED_EVENT_SEQ"}, rows)
	}
}
