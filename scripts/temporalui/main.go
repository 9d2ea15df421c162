// Command temporalui serves the Temporal Web UI (its assets are embedded in
// the github.com/temporalio/ui-server module this project already depends
// on) in front of a Temporal frontend, so the local production topology has
// a UI without pulling its image. Plain HTTP, for loopback use.
//
//	go run ./scripts/temporalui -temporal 127.0.0.1:7433 -listen 127.0.0.1:8233
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

func main() {
	temporal := flag.String("temporal", "127.0.0.1:7233", "Temporal frontend gRPC host:port")
	listen := flag.String("listen", "127.0.0.1:8233", "UI listen host:port")
	ns := flag.String("namespace", "default", "namespace the UI opens on")
	flag.Parse()
	host, portText, err := net.SplitHostPort(*listen)
	if err == nil {
		var port int
		if port, err = strconv.Atoi(portText); err == nil {
			err = serve(host, port, *temporal, *ns)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "temporalui:", err)
		os.Exit(1)
	}
}

func serve(host string, port int, temporal, ns string) error {
	srv := uiserver.NewServer(uioptions.WithConfigProvider(&uiconfig.Config{
		Host:                host,
		Port:                port,
		TemporalGRPCAddress: temporal,
		EnableUI:            true,
		DefaultNamespace:    ns,
		// Plain-HTTP loopback: secure cookies would never be sent back.
		CORS:             uiconfig.CORS{CookieInsecure: true},
		HideLogs:         true,
		DisableNewsFetch: true,
	}))
	return srv.Start()
}
