package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
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
