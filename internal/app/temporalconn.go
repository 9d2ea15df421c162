package app

import (
	"net"
	"strings"

	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/config"
)

// temporalConnection applies the connection settings (compression, TLS, API
// key) that reach a secured Temporal cluster such as Temporal Cloud. The
// settings were checked by config.ServerFromEnv and Check; an error here is
// a file that changed since.
func temporalConnection(opts *client.Options, c config.TemporalConn) error {
	opts.ConnectionOptions.GrpcCompression = TemporalCompression(opts.HostPort, c.Compression)
	tcfg, err := c.TLSConfig()
	if err != nil || tcfg == nil {
		return err
	}
	opts.ConnectionOptions.TLS = tcfg
	if c.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(c.APIKey)
	}
	return nil
}

// TemporalCompression is the gRPC compression for a Temporal frontend at
// hostPort under a BAE_TEMPORAL_COMPRESSION mode (config.ParseTemporalCompression).
// gzip or none decide; auto gives a loopback frontend (the dev server, a
// sidecar) none, because gzip there costs CPU on every call and saves no
// bandwidth, and any other the SDK's gzip.
func TemporalCompression(hostPort, mode string) client.GrpcCompression {
	switch mode {
	case config.CompressionGzip:
		return nil // the SDK default
	case config.CompressionNone:
		return &client.GrpcCompressionNone{}
	}
	if isLoopback(hostPort) {
		return &client.GrpcCompressionNone{}
	}
	return nil
}

func isLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = hostPort
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// TemporalConnection applies the connection settings to opts, for the other
// binaries that dial the same cluster (the launchers).
func TemporalConnection(opts *client.Options, c config.TemporalConn) error {
	return temporalConnection(opts, c)
}
