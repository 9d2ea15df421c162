package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/bae-go/bae-go/internal/config"
)

// devBanner is what `baesrv dev` prints once it serves: where everything
// is, and the baectl command that reaches this server from cwd (the data
// directory and ports it needs are spelled out when they are not the
// defaults baectl assumes).
func devBanner(srv config.Server, ui, cwd, exe string) string {
	var b strings.Builder
	row := func(what, value string) { fmt.Fprintf(&b, "  %-15s %s\n", what, value) }
	b.WriteString("\nbae-go dev is serving:\n")
	row("client API", urlFor(srv.Addr))
	row("admin API", fmt.Sprintf("%s   (admin key: %s)", urlFor(srv.AdminAddr), srv.AdminKeyFile))
	if srv.Console.Enabled() {
		scheme := "http"
		if srv.Console.TLSCert != "" {
			scheme = "https"
		}
		pw := "BAE_CONSOLE_PASSWORD"
		if srv.Console.Password == "" {
			pw = srv.Console.PasswordFile
		}
		row("console", fmt.Sprintf("%s://%s   (password: %s)", scheme, strings.TrimPrefix(urlFor(srv.Console.Addr), "http://"), pw))
	}
	if ui == "" {
		row("Temporal UI", "(disabled)")
	} else {
		row("Temporal UI", "http://"+ui)
	}
	row("Temporal gRPC", srv.TemporalAddr)
	if srv.ConfigPath == "" {
		row("config", "(none: no providers, no MCP servers)")
	} else {
		row("config", srv.ConfigPath)
	}
	row("data", srv.DataDir)
	fmt.Fprintf(&b, "Next, in another shell in %s:\n  %s quickstart        (prints a client key and what to run with it)\n\n",
		cwd, baectlCommand(srv, cwd, exe))
	return b.String()
}

// baectlCommand is the baectl next to the running baesrv (relative to cwd
// when it is below it, e.g. bin/baectl), preceded by the settings baectl
// would otherwise take from its defaults.
func baectlCommand(srv config.Server, cwd, exe string) string {
	var env []string
	set := func(name, value, def string) {
		if value != def {
			env = append(env, name+"="+shellWord(value))
		}
	}
	set("BAE_DATA_DIR", srv.DataDir, config.DefaultDataDir)
	set("BAE_ADMIN_ADDR", srv.AdminAddr, config.DefaultAdminAddr)
	set("BAE_ADMIN_KEY_FILE", srv.AdminKeyFile, filepath.Join(srv.DataDir, "admin-key.pem"))
	set("BAE_ADDR", srv.Addr, config.DefaultDevAddr) // the client URL quickstart prints
	bin := "baectl"
	if exe != "" {
		p := filepath.Join(filepath.Dir(exe), "baectl")
		if _, err := os.Stat(p); err == nil {
			bin = p
			if rel, err := filepath.Rel(cwd, p); err == nil && !strings.HasPrefix(rel, "..") {
				bin = rel
				if !strings.Contains(rel, string(filepath.Separator)) {
					bin = "." + string(filepath.Separator) + rel
				}
			}
		}
	}
	return strings.Join(append(env, shellWord(bin)), " ")
}

// shellWord quotes s for a POSIX shell when it needs quoting.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@-+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// urlFor turns a listen address into a URL a local client can use.
func urlFor(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
