package mcp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/childenv"
)

// Transport names accepted in ServerConfig.Transport.
const (
	TransportStdio = "stdio"
	TransportSSE   = "sse"
	TransportHTTP  = "http"
)

// conn is one initialized MCP client connection.
type conn struct {
	server    string
	transport string
	client    *client.Client
	// cancel ends the lifetime context the transport was started with (the
	// SSE event stream, the streamable-HTTP listener, stdio's handler context).
	cancel context.CancelFunc
	// cmd is the stdio subprocess; nil for the HTTP transports. Written once
	// by the command factory during Start, read only afterwards.
	cmd *exec.Cmd
	// unresolve puts each ${VAR} token of the entry back in place of what
	// it resolved to: an error quoting the command (exec's "no such file")
	// then shows the config file's words, never a resolved value.
	unresolve *strings.Replacer

	closeOnce sync.Once
	closeErr  error
}

// close terminates the connection; a stdio subprocess is terminated and
// reaped. It is idempotent and returns the first close's error, which for
// stdio is the process's wait status (an *exec.ExitError when it failed).
func (c *conn) close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.client.Close()
		c.cancel()
		killProcessGroup(c.cmd)
	})
	return c.closeErr
}

// pid is the stdio subprocess id, or 0.
func (c *conn) pid() int {
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// dial opens the transport named by cfg and runs the initialize handshake,
// all within ConnectTimeout. On failure nothing is left running.
func (m *Manager) dial(ctx context.Context, cfg ServerConfig) (*conn, error) {
	// The transport outlives this call, so it must not be started with ctx:
	// stdio would otherwise tie the process, and SSE its event stream, to the
	// caller's request.
	lifeCtx, cancel := context.WithCancel(context.Background())
	c := &conn{server: cfg.Name, transport: cfg.Transport, cancel: cancel}
	tr, err := m.newTransport(cfg, c)
	if err != nil {
		cancel()
		return nil, err
	}
	// Pin the initialize handshake: the stateless 2026-07-28 probe costs a
	// round trip (or a timeout) against the many servers that predate it,
	// and every current server still accepts initialize.
	c.client = client.NewClient(tr, client.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))

	initCtx, cancelInit := context.WithTimeout(ctx, m.connectTimeout)
	defer cancelInit()

	// Start blocks for SSE (waiting for the endpoint event) but only honours
	// the lifetime context, so abort it when the connect deadline passes.
	stop := context.AfterFunc(initCtx, cancel)
	err = c.client.Start(lifeCtx)
	if !stop() {
		err = errors.Join(err, initCtx.Err())
	}
	if err != nil {
		_ = c.close()
		return nil, c.redacted(fmt.Errorf("start %s transport: %w", cfg.Transport, err))
	}

	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	req.Params.ClientInfo = m.clientInfo
	if _, err := c.client.Initialize(initCtx, req); err != nil {
		_ = c.close()
		return nil, c.redacted(fmt.Errorf("initialize: %w", err))
	}
	return c, nil
}

// redactedError shows its cause with every URL redacted (config.RedactURL)
// and every resolved ${VAR} value put back as its token (conn.unresolve):
// connect errors quote the server's url, whose user info or query may be a
// credential, or its resolved command, and they reach the log and the
// model's tool result.
type redactedError struct {
	err       error
	unresolve *strings.Replacer
}

func (c *conn) redacted(err error) error { return redactedError{err, c.unresolve} }
func (e redactedError) Unwrap() error    { return e.err }
func (e redactedError) Error() string {
	msg := e.err.Error()
	if e.unresolve != nil {
		msg = e.unresolve.Replace(msg)
	}
	return config.RedactURLsIn(msg)
}

// unresolver maps each resolved value back to the template it came from,
// longest first so a value inside another is not replaced within it.
func unresolver(pairs map[string]string) *strings.Replacer {
	if len(pairs) == 0 {
		return nil
	}
	values := make([]string, 0, len(pairs))
	for v := range pairs {
		values = append(values, v)
	}
	slices.SortFunc(values, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	args := make([]string, 0, 2*len(values))
	for _, v := range values {
		args = append(args, v, pairs[v])
	}
	return strings.NewReplacer(args...)
}

// childEnv is a stdio server's environment (childenv.Build): what a program
// needs to run from the server's own, then the entry's env with its ${VAR}
// tokens resolved.
func childEnv(environ []string, entry map[string]string, lookup func(string) (string, bool)) ([]string, error) {
	own := make(map[string]string, len(entry))
	for _, name := range slices.Sorted(maps.Keys(entry)) { // the first unset one named, always the same
		v, err := config.ResolveEnvTokens(entry[name], lookup)
		if err != nil {
			return nil, fmt.Errorf("resolve env %q: %w", name, err)
		}
		own[name] = v
	}
	return childenv.Build(environ, own), nil
}

// newTransport builds the (unstarted) transport for cfg, resolving ${VAR}
// tokens now so resolved secrets live only inside the transport.
func (m *Manager) newTransport(cfg ServerConfig, c *conn) (transport.Interface, error) {
	switch cfg.Transport {
	case TransportStdio:
		if cfg.Command == "" {
			return nil, errors.New("stdio transport requires a command")
		}
		resolved := map[string]string{} // resolved value → its template
		command, err := config.ResolveEnvTokens(cfg.Command, m.env)
		if err != nil {
			return nil, fmt.Errorf("resolve command: %w", err)
		}
		if command != cfg.Command && command != "" {
			resolved[command] = cfg.Command
		}
		args := make([]string, len(cfg.Args))
		for i, a := range cfg.Args {
			if args[i], err = config.ResolveEnvTokens(a, m.env); err != nil {
				return nil, fmt.Errorf("resolve argument %d: %w", i, err)
			}
			if args[i] != a && args[i] != "" {
				resolved[args[i]] = a
			}
		}
		c.unresolve = unresolver(resolved)
		env, err := childEnv(os.Environ(), cfg.Env, m.env)
		if err != nil {
			return nil, err
		}
		factory := func(_ context.Context, command string, _, args []string) (*exec.Cmd, error) {
			// No CommandContext: the process lives until close, not until
			// some context ends.
			cmd := exec.Command(command, args...)
			cmd.Env = env
			setProcessGroup(cmd)
			c.cmd = cmd
			return cmd, nil
		}
		return transport.NewStdioWithOptions(command, nil, args,
			transport.WithCommandFunc(factory),
			transport.WithCommandLogger(m.log),
		), nil

	case TransportHTTP, TransportSSE:
		if cfg.URL == "" {
			return nil, fmt.Errorf("%s transport requires a url", cfg.Transport)
		}
		headers := make(map[string]string, len(cfg.Headers))
		templates := map[string]string{}
		for k, v := range cfg.Headers {
			resolved, err := config.ResolveEnvTokens(v, m.env)
			if err != nil {
				return nil, fmt.Errorf("resolve header %q: %w", k, err)
			}
			headers[k] = resolved
			if resolved != v && resolved != "" {
				templates[resolved] = v
			}
		}
		c.unresolve = unresolver(templates)
		if cfg.Transport == TransportHTTP {
			return transport.NewStreamableHTTP(cfg.URL,
				transport.WithHTTPHeaders(headers),
				transport.WithHTTPLogger(m.log),
			)
		}
		return transport.NewSSE(cfg.URL,
			transport.WithHeaders(headers),
			transport.WithSSELogger(m.log),
			transport.WithEndpointTimeout(m.connectTimeout),
			// The SSE transport has its own 60s reply cap; align it with ours.
			transport.WithResponseTimeout(m.callTimeout),
		)

	default:
		return nil, fmt.Errorf("unsupported transport %q", cfg.Transport)
	}
}
