package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/config"
)

// temporalConnection applies the TLS and API-key settings needed to reach a
// secured Temporal cluster (for example Temporal Cloud):
//
//	BAE_TEMPORAL_TLS=1                      TLS with the system roots
//	BAE_TEMPORAL_TLS_CA=<pem file>          custom CA (implies TLS)
//	BAE_TEMPORAL_TLS_CERT / _KEY=<pem>      mTLS client certificate (implies TLS)
//	BAE_TEMPORAL_API_KEY=<key>              API-key auth (implies TLS)
func temporalConnection(opts *client.Options, lookup func(string) (string, bool)) error {
	comp, err := TemporalCompression(opts.HostPort, lookup)
	if err != nil {
		return err
	}
	opts.ConnectionOptions.GrpcCompression = comp
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	ca, cert, key, apiKey := get("BAE_TEMPORAL_TLS_CA"), get("BAE_TEMPORAL_TLS_CERT"), get("BAE_TEMPORAL_TLS_KEY"), get("BAE_TEMPORAL_API_KEY")
	on := get("BAE_TEMPORAL_TLS")
	enabled := on == "1" || strings.EqualFold(on, "true") || ca != "" || cert != "" || apiKey != ""
	if !enabled {
		return nil
	}
	tcfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return &config.ValidationError{Msg: fmt.Sprintf("BAE_TEMPORAL_TLS_CA: %v", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return &config.ValidationError{Msg: "BAE_TEMPORAL_TLS_CA: no certificate found in " + ca}
		}
		tcfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return &config.ValidationError{Msg: "BAE_TEMPORAL_TLS_CERT and BAE_TEMPORAL_TLS_KEY must be set together"}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return &config.ValidationError{Msg: fmt.Sprintf("BAE_TEMPORAL_TLS_CERT/KEY: %v", err)}
		}
		tcfg.Certificates = []tls.Certificate{pair}
	}
	opts.ConnectionOptions.TLS = tcfg
	if apiKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(apiKey)
	}
	return nil
}

// TemporalCompression is the gRPC compression for a Temporal frontend at
// hostPort. BAE_TEMPORAL_COMPRESSION=gzip or none decides; unset (auto),
// a loopback frontend (the dev server, a sidecar) gets none, because gzip
// there costs CPU on every call and saves no bandwidth, and any other gets
// the SDK's gzip.
func TemporalCompression(hostPort string, lookup func(string) (string, bool)) (client.GrpcCompression, error) {
	v, _ := lookup("BAE_TEMPORAL_COMPRESSION")
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "auto":
		if isLoopback(hostPort) {
			return &client.GrpcCompressionNone{}, nil
		}
		return nil, nil // the SDK default (gzip)
	case "gzip":
		return nil, nil
	case "none":
		return &client.GrpcCompressionNone{}, nil
	}
	return nil, &config.ValidationError{Msg: fmt.Sprintf("BAE_TEMPORAL_COMPRESSION: %q is not auto, gzip or none", v)}
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

// TemporalConnection applies BAE_TEMPORAL_COMPRESSION and the TLS and
// API-key settings to opts, for the other binaries that dial the same
// cluster (the launchers).
func TemporalConnection(opts *client.Options, lookup func(string) (string, bool)) error {
	return temporalConnection(opts, lookup)
}
