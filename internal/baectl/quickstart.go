package baectl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

const (
	defaultQuickstartName = "quickstart"
	// defaultQuickstartTools is what the examples declare; a profile that
	// does not allow it would reject their sessions.
	defaultQuickstartTools = "get_current_time"
	defaultClientURL       = "http://127.0.0.1:8080"
)

// quickstartCmd gets a fresh server to "an SDK can talk to it" in one step:
// a profile on a configured provider (reused if it already exists) and a
// new client key for it.
func quickstartCmd(fs *pflag.FlagSet) runFunc {
	provider := fs.String("provider", "", "provider registry `NAME` (default: the first entry of `baectl list providers`)")
	profileName := fs.String("profile-name", defaultQuickstartName, "`NAME` of the profile to create or reuse")
	tools := fs.String("tools", defaultQuickstartTools, "comma-separated client-side `TOOLS` the profile allows (empty: none)")
	keyName := fs.String("key-name", "", "`NAME` of the client key (default: the profile name)")
	mcpServers := fs.StringArray("mcp-server", nil, "MCP server `NAME` the profile enables, repeatable (see `baectl list mcp-servers`)")
	clientURL := fs.String("client-url", "", "client API `URL` shown in the next steps (default: from BAE_ADDR, else "+defaultClientURL+")")
	asJSON := fs.Bool("json", false, `print {"profile", "profile_created", "key"} as JSON`)
	return func(ctx context.Context, e *invocation, _ []string) error {
		if strings.TrimSpace(*profileName) == "" {
			return usagef("--profile-name must not be blank")
		}
		c, err := e.admin()
		if err != nil {
			return err
		}
		primary, err := pickProvider(ctx, e, *provider)
		if err != nil {
			return err
		}
		if err := checkMCPServers(ctx, e, *mcpServers); err != nil {
			return err
		}
		allowed := splitList(*tools)
		prof, created, err := ensureProfile(ctx, c, *profileName, primary, allowed, *mcpServers)
		if err != nil {
			return err
		}
		if !created {
			warnReuse(e, prof, primary, *provider != "", allowed, *mcpServers)
		}
		name := *keyName
		if strings.TrimSpace(name) == "" {
			name = prof.Name
		}
		var k clientKey
		keyRaw, err := c.send(ctx, http.MethodPost, "/admin/v1/keys", map[string]any{"name": name, "profile_id": prof.ID}, &k)
		if err != nil {
			return fmt.Errorf("create client key for profile %s: %w", prof.ID, err)
		}
		defer fmt.Fprintln(e.stderr, "baectl: copy the key now — it cannot be retrieved again")
		if *asJSON {
			doc, err := json.Marshal(map[string]any{"profile": prof.raw, "profile_created": created, "key": json.RawMessage(keyRaw)})
			if err != nil {
				return fmt.Errorf("encode result: %w", err)
			}
			return printJSON(e.stdout, doc)
		}
		verb := "reused"
		if created {
			verb = "created"
		}
		url := resolveClientURL(*clientURL, e.env)
		w := e.stdout
		fmt.Fprintf(w, "%s profile %s (%s), primary_provider %s, allowed_tools %s\n",
			verb, prof.Name, prof.ID, prof.PrimaryProvider, listOrNone(prof.AllowedTools))
		fmt.Fprintf(w, "created key %s (%s), prefix %s\n\n", k.ID, k.Name, k.Prefix)
		fmt.Fprintf(w, "Client key (shown once):\n  %s\n\n", k.Key)
		fmt.Fprint(w, nextSteps(k.Key, url, prof.profile))
		return nil
	}
}

// pickProvider validates an explicit provider name against the live
// registry, or picks the registry's first entry. Unlike `create profile`,
// quickstart promises a profile that works, so an unknown name is an error.
func pickProvider(ctx context.Context, e *invocation, want string) (string, error) {
	items, _, err := getItems(ctx, e, "/admin/v1/providers")
	if err != nil {
		return "", err
	}
	ps, err := decodeItems[providerEntry](items)
	if err != nil {
		return "", err
	}
	if len(ps) == 0 {
		return "", errors.New("the server has no providers configured: add a [[providers.entries]] table " +
			"(name, provider, model, auth_token) to bae-config.toml, start baesrv with BAE_CONFIG pointing at it, and rerun")
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	if want == "" {
		return names[0], nil
	}
	if !slices.Contains(names, want) {
		return "", fmt.Errorf("provider %q is not configured on the server (configured: %s)", want, strings.Join(names, ", "))
	}
	return want, nil
}

// foundProfile is a profile plus the server's bytes for --json.
type foundProfile struct {
	profile
	raw json.RawMessage
}

// ensureProfile returns the profile named name, creating it if absent. A
// concurrent quickstart that wins the create race is handled by looking the
// name up again.
func ensureProfile(ctx context.Context, c *adminClient, name, primary string, tools, mcpServers []string) (foundProfile, bool, error) {
	if p, ok, err := findProfile(ctx, c, name); err != nil || ok {
		return p, false, err
	}
	body, err := (&profileFlags{allowedTools: tools, mcpServers: mcpServers}).body(name, primary)
	if err != nil {
		return foundProfile{}, false, err
	}
	var created profile
	_, err = c.send(ctx, http.MethodPost, "/admin/v1/profiles", body, &created)
	var apiErr *apiError
	if errors.As(err, &apiErr) && apiErr.Type == "duplicate_name" {
		p, ok, ferr := findProfile(ctx, c, name)
		if ferr != nil || ok {
			return p, false, ferr
		}
	}
	if err != nil {
		return foundProfile{}, false, fmt.Errorf("create profile %s: %w", name, err)
	}
	var p foundProfile
	raw, err := c.getInto(ctx, profilePath(created.ID), nil, &p.profile)
	if err != nil {
		return foundProfile{}, false, fmt.Errorf("read back profile %s: %w", created.ID, err)
	}
	p.raw = raw
	return p, true, nil
}

func findProfile(ctx context.Context, c *adminClient, name string) (foundProfile, bool, error) {
	items, err := c.listAll(ctx, "/admin/v1/profiles", nil)
	if err != nil {
		return foundProfile{}, false, err
	}
	for _, it := range items {
		var p profile
		if err := decode(it, &p); err != nil {
			return foundProfile{}, false, err
		}
		if p.Name == name {
			return foundProfile{profile: p, raw: it}, true, nil
		}
	}
	return foundProfile{}, false, nil
}

// warnReuse points out where a reused profile differs from what this run
// asked for; it is left unchanged because other keys may depend on it.
func warnReuse(e *invocation, p foundProfile, primary string, explicitProvider bool, tools, mcpServers []string) {
	if explicitProvider && p.PrimaryProvider != primary {
		fmt.Fprintf(e.stderr, "baectl: reusing existing profile %s whose primary_provider is %s, not %s; change it with `baectl update profile %s %s`\n",
			p.Name, p.PrimaryProvider, primary, p.ID, primary)
	}
	var missing []string
	for _, t := range tools {
		if !slices.Contains(p.AllowedTools, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(e.stderr, "baectl: reusing existing profile %s, which does not allow tool(s) %s\n", p.Name, strings.Join(missing, ", "))
	}
	missing = nil
	for _, m := range mcpServers {
		if !slices.Contains(p.MCPServers, m) {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(e.stderr, "baectl: reusing existing profile %s, which does not enable MCP server(s) %s; use a new --profile-name\n", p.Name, strings.Join(missing, ", "))
	}
}

// checkMCPServers validates --mcp-server names against the live registry:
// a profile naming an unknown server would open sessions without it.
func checkMCPServers(ctx context.Context, e *invocation, want []string) error {
	if len(want) == 0 {
		return nil
	}
	items, _, err := getItems(ctx, e, "/admin/v1/mcp-servers")
	if err != nil {
		return err
	}
	ms, err := decodeItems[mcpServer](items)
	if err != nil {
		return err
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	for _, w := range want {
		if !slices.Contains(names, w) {
			return fmt.Errorf("MCP server %q is not configured on the server (configured: %s)", w, listOrNone(names))
		}
	}
	return nil
}

// exampleMCPServer is the bundled examples/mcp-words server of dev.toml,
// for which nextSteps can show a prompt that calls one of its tools.
const exampleMCPServer = "words"

// nextSteps are commands that work as printed in a new shell from the
// repository root: binaries from bin/ (make build), or go run with the
// toolchain named, since a shell's default Go may be older than go.mod's.
func nextSteps(key, url string, p profile) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Next, in any shell from the repository root (`make build` put the binaries in bin/):\n")
	fmt.Fprintf(&b, "  export BAE_CLIENT_KEY=%s\n", key)
	if url != defaultClientURL {
		fmt.Fprintf(&b, "  export BAE_SERVER_URL=%s\n", url)
	}
	fmt.Fprintf(&b, "  bin/assistant -prompt \"hello\"\n")
	if slices.Contains(p.AllowedTools, defaultQuickstartTools) {
		fmt.Fprintf(&b, "  bin/assistant -prompt \"What time is it?\"   # the model calls %s; the assistant runs it\n", defaultQuickstartTools)
	}
	for _, m := range p.MCPServers {
		if m == exampleMCPServer {
			fmt.Fprintf(&b, "  bin/assistant -prompt \"Use count_words on: the quick brown fox\"   # MCP server %s runs it on the server\n", m)
		} else {
			fmt.Fprintf(&b, "  bin/assistant -v   # MCP server %s: ask for one of its tools\n", m)
		}
	}
	fmt.Fprintf(&b, "  (without bin/: GOTOOLCHAIN=go1.27.3 go run ./examples/assistant -prompt \"hello\")\n\n")
	fmt.Fprintf(&b, "Or with curl (needs jq):\n%s", curlSteps(url))
	return b.String()
}

func splitList(s string) []string {
	out := []string{}
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// resolveClientURL applies --client-url > BAE_ADDR (the server's client
// listen address; a wildcard host becomes loopback) > the default.
func resolveClientURL(flagValue string, env LookupEnv) string {
	if v := strings.TrimSpace(flagValue); v != "" {
		return strings.TrimRight(v, "/")
	}
	addr := env.get("BAE_ADDR")
	if addr == "" {
		return defaultClientURL
	}
	if strings.Contains(addr, "://") {
		return strings.TrimRight(addr, "/")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return defaultClientURL
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func curlSteps(url string) string {
	return fmt.Sprintf(`  read SID SKEY < <(curl -fsS -X POST %[1]s/api/v1/sessions \
    -H "Authorization: Bearer $BAE_CLIENT_KEY" -H 'Content-Type: application/json' \
    -d '{"client_version":"curl"}' | jq -r '"\(.session_id) \(.session_key)"')
  curl -fsSN -X POST %[1]s/api/v1/sessions/$SID/rpc -H "Authorization: Bearer $SKEY" \
    -H 'Content-Type: application/json' -d '{"jsonrpc":"2.0","id":1,"method":"session.registerDriver","params":{}}'
  curl -fsSN -X POST %[1]s/api/v1/sessions/$SID/rpc -H "Authorization: Bearer $SKEY" \
    -H 'Content-Type: application/json' \
    -d '{"jsonrpc":"2.0","id":2,"method":"session.sendMessage","params":{"message":{"role":"user","content":"hello"}}}'
`, url)
}
