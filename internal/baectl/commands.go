package baectl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/pflag"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/events"
)

// Wire shapes of the admin API, decoded only for human output; --json
// always prints the server's bytes.
type (
	profile        = wire.Profile
	clientKey      = wire.ClientKey
	sandboxProfile = wire.SandboxStatus
	session        struct {
		ID            string  `json:"id"`
		ProfileID     string  `json:"profile_id"`
		State         string  `json:"state"`
		ClientVersion *string `json:"client_version"`
		CreatedAt     string  `json:"created_at"`
		ClosedAt      *string `json:"closed_at"`
	}
	event struct {
		ID          string          `json:"id"`
		ClientKeyID *string         `json:"client_key_id"`
		EventType   events.Type     `json:"event_type"`
		Payload     json.RawMessage `json:"payload"`
		CreatedAt   string          `json:"created_at"`
	}
	providerEntry struct {
		Name     string `json:"name"`
		Provider string `json:"provider"`
		Model    string `json:"model"`
		BaseURL  string `json:"base_url"`
	}
	mcpServer struct {
		Name      string `json:"name"`
		Transport string `json:"transport"`
	}
	// itemsDoc is the shape of the non-paginated registry listings.
	itemsDoc struct {
		Items *[]json.RawMessage `json:"items"`
	}
)

// commands is the full command tree.
func commands() []command {
	return append([]command{
		{path: "create profile", args: []string{"name", "primary_provider"}, setup: createProfileCmd,
			summary: "Create a profile. primary_provider is the name of a [[providers.entries]] entry in bae-config.toml."},
		{path: "list profiles", setup: listProfilesCmd,
			summary: "List profiles (every page unless --limit or --cursor is given)."},
		{path: "get profile", args: []string{"id"}, setup: getProfileCmd,
			summary: "Show every field of one profile."},
		{path: "update profile", args: []string{"id", "primary_provider"}, setup: updateProfileCmd,
			summary: "Replace a profile (PUT): list flags left unset are cleared. Keeps the name unless --name is given."},
		{path: "delete profile", args: []string{"id"}, setup: deleteProfileCmd,
			summary: "Soft-delete a profile (it must have no active client keys)."},
		{path: "create key", args: []string{"name", "profile_id"}, setup: createKeyCmd,
			summary: "Create a client key bound to a profile. The plaintext key is shown once."},
		{path: "list keys", setup: listKeysCmd,
			summary: "List active client keys."},
		{path: "delete key", args: []string{"id"}, setup: deleteKeyCmd,
			summary: "Revoke a client key, its session keys and its open sessions."},
		{path: "revoke key", args: []string{"id"}, setup: deleteKeyCmd,
			summary: "Alias of `delete key`."},
		{path: "list sessions", setup: listSessionsCmd,
			summary: "List sessions, optionally filtered by --state open|closed|error."},
		{path: "list events", args: []string{"session_id"}, setup: listEventsCmd,
			summary: "Show a session's event history (works for closed sessions too)."},
		{path: "fork session", args: []string{"session_id", "client_key_id"}, setup: forkSessionCmd,
			summary: "Fork a session for one of its participants (client_key_id): a new idle session whose history is the source's, shared. The session key is shown once."},
		{path: "rewind session", args: []string{"session_id"}, setup: rewindSessionCmd,
			summary: "Rewind a session to before a turn (--turn) or an event (--before-event): the turns after it leave the conversation the model sees and stay in the log; a running turn is interrupted first. Tool side effects are not undone."},
		{path: "get lineage", args: []string{"session_id"}, setup: lineageCmd,
			summary: "Show where a session was forked from and the sessions forked from it."},
		{path: "list providers", setup: listProvidersCmd,
			summary: "List the LLM providers the server loaded from bae-config.toml."},
		{path: "list mcp-servers", setup: listMCPServersCmd,
			summary: "List the MCP servers the server loaded from bae-config.toml."},
		{path: "get config", setup: getConfigCmd,
			summary: "Show the loaded configuration (MCP servers, providers, telemetry), secrets redacted."},
		{path: "get sandbox-status", setup: sandboxStatusCmd,
			summary: "Show per-profile sandbox image provisioning status."},
		{path: "list sandbox-status", setup: sandboxStatusCmd,
			summary: "Alias of `get sandbox-status`."},
		{path: "auth create key", setup: authCreateKeyCmd,
			summary: "Generate an admin key pair locally (no server call): admin-key.pem and admin-key-hash.pem."},
		{path: "quickstart", setup: quickstartCmd,
			summary: "Create (or reuse) a profile and a client key in one step, and print how to use them."},
		{path: "setup", setup: setupCmd,
			summary: "Write a runnable deployment (docker compose or a single baesrv dev process): an interactive wizard, no server call.\n" +
				"It asks a few questions; Enter takes each default, and the defaults give a deployment that runs\n" +
				"offline (the fake provider). Every question has a flag, and --yes asks nothing. It writes\n" +
				"bae-config.toml, .env (mode 0600) and docker-compose.yml (compose) or bae-dev.sh (dev) into --dir."},
	}, append(usageCommands(), approvalCommands()...)...)
}

// profileFlags are the body fields shared by create and update.
type profileFlags struct {
	fallbacks, mcpServers, allowedTools, sandboxes []string
	// sandboxLimits is the profile's "sandbox" object as JSON text.
	sandboxLimits string
	// context is the profile's compaction policy as JSON text.
	context string
	// modelSettings are the profile's model_settings overrides as JSON
	// text.
	modelSettings string
	// approvals is the profile's approval policy as JSON text.
	approvals string
}

// register binds the list flags; each is repeatable and keeps commas
// literally (StringArray, not StringSlice).
func (p *profileFlags) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&p.fallbacks, "fallback", nil, "fallback provider registry `NAME`, repeatable, tried in order")
	fs.StringArrayVar(&p.mcpServers, "mcp-server", nil, "MCP server `NAME` to enable, repeatable")
	fs.StringArrayVar(&p.allowedTools, "allowed-tool", nil, "client-side tool `NAME` to allow, repeatable (none: no client tools)")
	fs.StringArrayVar(&p.sandboxes, "sandbox", nil, "sandbox `IMAGE` the profile may use, repeatable")
	fs.StringVar(&p.sandboxLimits, "sandbox-limits", "", "`JSON` object overriding the server's [sandbox] bounds, e.g. '{\"network\":\"bridge\"}' (none: the server's)")
	fs.StringVar(&p.context, "context", "", "`JSON` compaction policy, e.g. '{\"keep_turns\":6}' or '{\"enabled\":false}' (none: the default, on)")
	fs.StringVar(&p.modelSettings, "model-settings", "", "`JSON` model settings by provider entry name, overriding the entries', e.g. '{\"opus\":{\"effort\":\"max\"}}' (none: the entries' own)")
	fs.StringVar(&p.approvals, "approvals", "", "`JSON` approval policy, e.g. '{\"rules\":[{\"kind\":\"mcp\",\"server\":\"github\",\"tool\":\"create_*\"}]}' (none: no approvals)")
}

// body always carries every list and the sandbox object, so a PUT clears
// what was not re-specified. The server validates the sandbox object; a
// --sandbox-limits that is not JSON is a usage error.
func (p *profileFlags) body(name, primary string) (map[string]any, error) {
	nonNil := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	limits := json.RawMessage(`{}`)
	if strings.TrimSpace(p.sandboxLimits) != "" {
		if !json.Valid([]byte(p.sandboxLimits)) {
			return nil, usagef("--sandbox-limits: not valid JSON: %s", p.sandboxLimits)
		}
		limits = json.RawMessage(p.sandboxLimits)
	}
	policy := json.RawMessage(`null`)
	if strings.TrimSpace(p.context) != "" {
		if !json.Valid([]byte(p.context)) {
			return nil, usagef("--context: not valid JSON: %s", p.context)
		}
		policy = json.RawMessage(p.context)
	}
	body := map[string]any{
		"name": name, "primary_provider": primary,
		"fallback_providers": nonNil(p.fallbacks), "mcp_servers": nonNil(p.mcpServers),
		"allowed_tools": nonNil(p.allowedTools), "available_sandboxes": nonNil(p.sandboxes),
		"sandbox": limits, "context": policy, "approvals": json.RawMessage(`null`),
	}
	if strings.TrimSpace(p.modelSettings) != "" {
		if !json.Valid([]byte(p.modelSettings)) {
			return nil, usagef("--model-settings: not valid JSON: %s", p.modelSettings)
		}
		body["model_settings"] = json.RawMessage(p.modelSettings)
	}
	if strings.TrimSpace(p.approvals) != "" {
		if !json.Valid([]byte(p.approvals)) {
			return nil, usagef("--approvals: not valid JSON: %s", p.approvals)
		}
		body["approvals"] = json.RawMessage(p.approvals)
	}
	return body, nil
}

func createProfileCmd(fs *pflag.FlagSet) runFunc {
	var pf profileFlags
	pf.register(fs)
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		body, err := pf.body(args[0], args[1])
		if err != nil {
			return err
		}
		var created struct {
			profile
			Warnings []wire.Warning `json:"warnings"`
		}
		raw, err := c.send(ctx, http.MethodPost, "/admin/v1/profiles", body, &created)
		if err != nil {
			return err
		}
		printWarnings(e, created.Warnings)
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		fmt.Fprintln(e.stdout, "created profile")
		return fields(e.stdout, "  ", [][2]string{{"id", created.ID}, {"name", created.Name}, {"created_at", created.CreatedAt}})
	}
}

// printWarnings shows what the server stored but wants the operator to
// know (a provider the registry does not hold), on stderr so that --json
// output stays the server's document.
func printWarnings(e *invocation, warns []wire.Warning) {
	for _, w := range warns {
		fmt.Fprintf(e.stderr, "baectl: warning: %s (%s)\n", w.Detail, w.Type)
	}
}

func printProfile(e *invocation, p profile) error {
	return fields(e.stdout, "", [][2]string{
		{"id", p.ID}, {"name", p.Name}, {"primary_provider", p.PrimaryProvider},
		{"fallback_providers", listOrNone(p.FallbackProviders)}, {"mcp_servers", listOrNone(p.MCPServers)},
		{"allowed_tools", listOrNone(p.AllowedTools)}, {"available_sandboxes", listOrNone(p.AvailableSandboxes)},
		{"sandbox", sandboxOrDefaults(p.Sandbox)}, {"context", compactJSON(p.Context)},
		{"model_settings", modelSettingsOrNone(p.ModelSettings)}, {"approvals", approvalsOrNone(p.Approvals)},
		{"created_at", p.CreatedAt}, {"updated_at", p.UpdatedAt},
	})
}

// modelSettingsOrNone shows a profile's model_settings on one line.
func modelSettingsOrNone(raw json.RawMessage) string {
	var buf bytes.Buffer
	if len(raw) == 0 || json.Compact(&buf, raw) != nil || buf.String() == "null" {
		return "(none: the provider entries' own)"
	}
	return buf.String()
}

// approvalsOrNone shows a profile's approval policy on one line.
func approvalsOrNone(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "(none)"
	}
	return compactJSON(raw)
}

// sandboxOrDefaults shows a profile's sandbox overrides on one line.
func sandboxOrDefaults(raw json.RawMessage) string {
	var buf bytes.Buffer
	if len(raw) == 0 || json.Compact(&buf, raw) != nil || buf.String() == "{}" || buf.String() == "null" {
		return "(server defaults)"
	}
	return buf.String()
}

func profilePath(id string) string { return "/admin/v1/profiles/" + url.PathEscape(id) }

func getProfileCmd(fs *pflag.FlagSet) runFunc { return getOneCmd(fs, profilePath, printProfile) }

// getOneCmd gets the document at path(id) for a command whose one argument
// is id, and prints it raw with --json, else through print.
func getOneCmd[T any](fs *pflag.FlagSet, path func(id string) string, print func(*invocation, T) error) runFunc {
	asJSON := fs.Bool("json", false, "print the raw JSON document")
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		var doc T
		raw, err := c.getInto(ctx, path(args[0]), nil, &doc)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		return print(e, doc)
	}
}

func updateProfileCmd(fs *pflag.FlagSet) runFunc {
	var pf profileFlags
	pf.register(fs)
	name := fs.String("name", "", "new profile `NAME` (default: keep the current name)")
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		newName := *name
		if !fs.Changed("name") {
			// PUT needs a name but the positional signature has none: keep
			// the current one.
			var cur profile
			if _, err := c.getInto(ctx, profilePath(args[0]), nil, &cur); err != nil {
				return err
			}
			newName = cur.Name
		}
		body, err := pf.body(newName, args[1])
		if err != nil {
			return err
		}
		var p struct {
			profile
			Warnings []wire.Warning `json:"warnings"`
		}
		raw, err := c.send(ctx, http.MethodPut, profilePath(args[0]), body, &p)
		if err != nil {
			return err
		}
		printWarnings(e, p.Warnings)
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		return printProfile(e, p.profile)
	}
}

func deleteProfileCmd(_ *pflag.FlagSet) runFunc {
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		if _, err := c.send(ctx, http.MethodDelete, profilePath(args[0]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "deleted profile %s\n", args[0])
		return nil
	}
}

func createKeyCmd(fs *pflag.FlagSet) runFunc {
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		var k clientKey
		raw, err := c.send(ctx, http.MethodPost, "/admin/v1/keys", map[string]any{"name": args[0], "profile_id": args[1]}, &k)
		if err != nil {
			return err
		}
		if *asJSON {
			err = printJSON(e.stdout, raw)
		} else {
			fmt.Fprintln(e.stdout, "created key")
			err = fields(e.stdout, "  ", [][2]string{
				{"id", k.ID}, {"name", k.Name}, {"key", k.Key}, {"prefix", k.Prefix},
				{"profile_id", k.ProfileID}, {"created_at", k.CreatedAt},
			})
		}
		fmt.Fprintln(e.stderr, "baectl: copy the key now — it cannot be retrieved again")
		return err
	}
}

func deleteKeyCmd(_ *pflag.FlagSet) runFunc {
	return func(ctx context.Context, e *invocation, args []string) error {
		c, err := e.admin()
		if err != nil {
			return err
		}
		if _, err := c.send(ctx, http.MethodDelete, "/admin/v1/keys/"+url.PathEscape(args[0]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "revoked key %s\n", args[0])
		return nil
	}
}

// listFlags select between auto-pagination and one raw page.
type listFlags struct {
	limit  int
	cursor string
	json   bool
}

func (l *listFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&l.limit, "limit", 0, "fetch one page of at most `N` items (disables auto-pagination)")
	fs.StringVar(&l.cursor, "cursor", "", "fetch one page starting at this opaque `CURSOR` (disables auto-pagination)")
	fs.BoolVar(&l.json, "json", false, "print raw JSON: a flat array, or the page document with --limit/--cursor")
}

// runList fetches a cursor-paginated list and prints it with render, or as
// JSON. With neither --limit nor --cursor every page is fetched.
func runList(ctx context.Context, e *invocation, fs *pflag.FlagSet, lf *listFlags, path string, query url.Values,
	render func(items []json.RawMessage) error) error {
	singlePage := fs.Changed("limit") || fs.Changed("cursor")
	if fs.Changed("limit") && lf.limit <= 0 {
		return usagef("--limit must be a positive integer")
	}
	c, err := e.admin()
	if err != nil {
		return err
	}
	if !singlePage {
		items, err := c.listAll(ctx, path, query)
		if err != nil {
			return err
		}
		if lf.json {
			return printItemsJSON(e.stdout, items)
		}
		return render(items)
	}
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	if fs.Changed("limit") {
		q.Set("limit", fmt.Sprint(lf.limit))
	}
	if lf.cursor != "" {
		q.Set("cursor", lf.cursor)
	}
	p, raw, err := c.listPage(ctx, path, q)
	if err != nil {
		return err
	}
	if lf.json {
		return printJSON(e.stdout, raw)
	}
	if err := render(*p.Items); err != nil {
		return err
	}
	if p.NextCursor != nil && *p.NextCursor != "" {
		// stderr, so the table on stdout stays machine-readable.
		fmt.Fprintf(e.stderr, "baectl: more results: rerun with --cursor %s\n", *p.NextCursor)
	}
	return nil
}

func listProfilesCmd(fs *pflag.FlagSet) runFunc {
	var lf listFlags
	lf.register(fs)
	return func(ctx context.Context, e *invocation, _ []string) error {
		return runList(ctx, e, fs, &lf, "/admin/v1/profiles", nil, func(items []json.RawMessage) error {
			ps, err := decodeItems[profile](items)
			if err != nil {
				return err
			}
			if len(ps) == 0 {
				fmt.Fprintln(e.stdout, "no profiles found")
				return nil
			}
			rows := make([][]string, 0, len(ps))
			for _, p := range ps {
				rows = append(rows, []string{p.ID, p.Name, p.PrimaryProvider})
			}
			return table(e.stdout, []string{"ID", "NAME", "PRIMARY_PROVIDER"}, rows)
		})
	}
}

func listKeysCmd(fs *pflag.FlagSet) runFunc {
	var lf listFlags
	lf.register(fs)
	return func(ctx context.Context, e *invocation, _ []string) error {
		return runList(ctx, e, fs, &lf, "/admin/v1/keys", nil, func(items []json.RawMessage) error {
			ks, err := decodeItems[clientKey](items)
			if err != nil {
				return err
			}
			if len(ks) == 0 {
				fmt.Fprintln(e.stdout, "no keys found")
				return nil
			}
			rows := make([][]string, 0, len(ks))
			for _, k := range ks {
				rows = append(rows, []string{k.ID, k.Name, k.Prefix, k.ProfileID})
			}
			return table(e.stdout, []string{"ID", "NAME", "PREFIX", "PROFILE_ID"}, rows)
		})
	}
}

func listSessionsCmd(fs *pflag.FlagSet) runFunc {
	var lf listFlags
	lf.register(fs)
	state := fs.String("state", "", "only sessions in this `STATE`: open, closed or error")
	return func(ctx context.Context, e *invocation, _ []string) error {
		var q url.Values
		switch *state {
		case "":
		case "open", "closed", "error":
			q = url.Values{"state": {*state}}
		default:
			return usagef("--state must be one of open, closed, error (got %q)", *state)
		}
		return runList(ctx, e, fs, &lf, "/admin/v1/sessions", q, func(items []json.RawMessage) error {
			ss, err := decodeItems[session](items)
			if err != nil {
				return err
			}
			if len(ss) == 0 {
				fmt.Fprintln(e.stdout, "no sessions found")
				return nil
			}
			rows := make([][]string, 0, len(ss))
			for _, s := range ss {
				rows = append(rows, []string{s.ID, s.ProfileID, s.State, strOr(s.ClientVersion, "-"), s.CreatedAt, strOr(s.ClosedAt, "-")})
			}
			return table(e.stdout, []string{"ID", "PROFILE_ID", "STATE", "CLIENT_VERSION", "CREATED_AT", "CLOSED_AT"}, rows)
		})
	}
}

// payloadWidth keeps an ordinary event row on one terminal line; --wide and
// --json show everything.
const payloadWidth = 80

func listEventsCmd(fs *pflag.FlagSet) runFunc {
	var lf listFlags
	lf.register(fs)
	wide := fs.Bool("wide", false, "print every payload in full (default: failures in full, others shortened)")
	return func(ctx context.Context, e *invocation, args []string) error {
		path := "/admin/v1/sessions/" + url.PathEscape(args[0]) + "/events"
		return runList(ctx, e, fs, &lf, path, nil, func(items []json.RawMessage) error {
			evs, err := decodeItems[event](items)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				fmt.Fprintln(e.stdout, "no events found")
				return nil
			}
			rows := make([][]string, 0, len(evs))
			for _, ev := range evs {
				rows = append(rows, []string{ev.ID, ev.CreatedAt, string(ev.EventType), eventPayloadCell(ev, *wide)})
			}
			return table(e.stdout, []string{"ID", "CREATED_AT", "EVENT_TYPE", "PAYLOAD"}, rows)
		})
	}
}

// eventPayloadCell renders a payload for the table. The reason for a failure
// is what `list events` is read for, so a session.error, or any payload with
// "ok": false, is never shortened; only a failed provider.response's "body"
// (the provider's whole answer) is elided.
func eventPayloadCell(ev event, wide bool) string {
	if wide {
		return compactJSON(ev.Payload)
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(ev.Payload, &fields) == nil {
		failed := ev.EventType == events.SessionError || string(fields["ok"]) == "false"
		if failed {
			if _, ok := fields["body"]; ok {
				fields["body"] = json.RawMessage(`"…"`)
			}
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false) // error texts often quote HTML bodies
			if enc.Encode(fields) == nil {
				return strings.TrimSpace(b.String())
			}
		}
	}
	return truncate(compactJSON(ev.Payload), payloadWidth)
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// getItems fetches a non-paginated {"items": [...]} registry listing.
func getItems(ctx context.Context, e *invocation, path string) ([]json.RawMessage, []byte, error) {
	c, err := e.admin()
	if err != nil {
		return nil, nil, err
	}
	var doc itemsDoc
	raw, err := c.getInto(ctx, path, nil, &doc)
	if err != nil {
		return nil, nil, err
	}
	if doc.Items == nil {
		return nil, nil, fmt.Errorf("%w: %s has no items", errVersionSkew, path)
	}
	return *doc.Items, raw, nil
}

func listProvidersCmd(fs *pflag.FlagSet) runFunc {
	asJSON := fs.Bool("json", false, "print the raw JSON document")
	return func(ctx context.Context, e *invocation, _ []string) error {
		items, raw, err := getItems(ctx, e, "/admin/v1/providers")
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		ps, err := decodeItems[providerEntry](items)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			fmt.Fprintln(e.stdout, "no providers configured")
			return nil
		}
		rows := make([][]string, 0, len(ps))
		for _, p := range ps {
			rows = append(rows, []string{p.Name, p.Provider, p.Model, p.BaseURL})
		}
		return table(e.stdout, []string{"NAME", "PROVIDER", "MODEL", "BASE_URL"}, rows)
	}
}

func listMCPServersCmd(fs *pflag.FlagSet) runFunc {
	asJSON := fs.Bool("json", false, "print the raw JSON document")
	return func(ctx context.Context, e *invocation, _ []string) error {
		items, raw, err := getItems(ctx, e, "/admin/v1/mcp-servers")
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		ms, err := decodeItems[mcpServer](items)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			fmt.Fprintln(e.stdout, "no MCP servers configured")
			return nil
		}
		rows := make([][]string, 0, len(ms))
		for _, m := range ms {
			rows = append(rows, []string{m.Name, m.Transport})
		}
		return table(e.stdout, []string{"NAME", "TRANSPORT"}, rows)
	}
}

func sandboxStatusCmd(fs *pflag.FlagSet) runFunc {
	asJSON := fs.Bool("json", false, "print the raw JSON document")
	return func(ctx context.Context, e *invocation, _ []string) error {
		items, raw, err := getItems(ctx, e, "/admin/v1/sandbox-status")
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, raw)
		}
		ps, err := decodeItems[sandboxProfile](items)
		if err != nil {
			return err
		}
		var rows [][]string
		for _, p := range ps {
			for _, img := range p.Images {
				rows = append(rows, []string{p.ProfileID, img.Name, img.Status, img.Detail})
			}
		}
		if len(rows) == 0 {
			fmt.Fprintln(e.stdout, "no sandbox images declared by any profile")
			return nil
		}
		return table(e.stdout, []string{"PROFILE_ID", "IMAGE", "STATUS", "DETAIL"}, rows)
	}
}
