package config

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
)

// BAE_TEMPORAL_COMPRESSION values.
const (
	CompressionAuto = "auto"
	CompressionGzip = "gzip"
	CompressionNone = "none"
)

// TemporalConn is how serve reaches its Temporal frontend (BAE_TEMPORAL_TLS*,
// BAE_TEMPORAL_API_KEY, BAE_TEMPORAL_COMPRESSION). ServerFromEnv checks the
// values and TLSConfig reads the files, both before the server touches the
// database, so a bad setting is exit 2 with nothing created.
type TemporalConn struct {
	// Compression is CompressionAuto, CompressionGzip or CompressionNone.
	Compression string
	// TLS is BAE_TEMPORAL_TLS, or implied by a CA, a client certificate or
	// an API key.
	TLS      bool
	CAFile   string // BAE_TEMPORAL_TLS_CA
	CertFile string // BAE_TEMPORAL_TLS_CERT
	KeyFile  string // BAE_TEMPORAL_TLS_KEY
	APIKey   string // BAE_TEMPORAL_API_KEY
}

// TemporalFromEnv is where and how another binary (the launchers) reaches
// the Temporal cluster baesrv serve uses: the same variables, the same
// defaults.
func TemporalFromEnv(lookup func(string) (string, bool)) (addr, namespace string, conn TemporalConn, err error) {
	get := func(name, def string) string {
		if v, ok := lookup(name); ok {
			if v = strings.TrimSpace(v); v != "" {
				return v
			}
		}
		return def
	}
	conn, err = temporalConnFromEnv(get)
	return get("BAE_TEMPORAL_ADDR", DefaultTemporalAddr), get("BAE_TEMPORAL_NAMESPACE", DefaultTemporalNamespace), conn, err
}

func temporalConnFromEnv(get func(name, def string) string) (TemporalConn, error) {
	c := TemporalConn{
		CAFile: get("BAE_TEMPORAL_TLS_CA", ""), CertFile: get("BAE_TEMPORAL_TLS_CERT", ""),
		KeyFile: get("BAE_TEMPORAL_TLS_KEY", ""), APIKey: get("BAE_TEMPORAL_API_KEY", ""),
	}
	var err error
	if c.Compression, err = ParseTemporalCompression(get("BAE_TEMPORAL_COMPRESSION", CompressionAuto)); err != nil {
		return TemporalConn{}, err
	}
	c.TLS = truthy(get("BAE_TEMPORAL_TLS", "")) || c.CAFile != "" || c.CertFile != "" || c.APIKey != ""
	if (c.CertFile == "") != (c.KeyFile == "") {
		return TemporalConn{}, invalidf("BAE_TEMPORAL_TLS_CERT and BAE_TEMPORAL_TLS_KEY must be set together")
	}
	return c, nil
}

// ParseTemporalCompression checks a BAE_TEMPORAL_COMPRESSION value; "" is
// CompressionAuto.
func ParseTemporalCompression(v string) (string, error) {
	switch m := strings.ToLower(strings.TrimSpace(v)); m {
	case "", CompressionAuto:
		return CompressionAuto, nil
	case CompressionGzip, CompressionNone:
		return m, nil
	}
	return "", invalidf("BAE_TEMPORAL_COMPRESSION: %q is not auto, gzip or none", v)
}

// TLSConfig reads the CA and client certificate files; nil when TLS is off.
func (c TemporalConn) TLSConfig() (*tls.Config, error) {
	if !c.TLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, &ValidationError{Msg: "BAE_TEMPORAL_TLS_CA", Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, invalidf("BAE_TEMPORAL_TLS_CA: no certificate found in %s", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, &ValidationError{Msg: "BAE_TEMPORAL_TLS_CERT/KEY", Err: err}
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
