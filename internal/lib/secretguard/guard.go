// Package secretguard keeps known secrets out of Temporal payloads.
//
// By design no secret ever enters a workflow or activity argument or result
// (provider tokens and MCP header values are resolved inside activities at
// call time). This codec is the belt to that design's braces: every payload
// sent to Temporal is scanned for the resolved values of the configured
// secrets, and any occurrence is replaced by the redaction marker before it
// can reach workflow history.
package secretguard

import (
	"bytes"
	"sort"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/bae-go/bae-go/internal/config"
)

// minSecretLen skips values too short to be secrets (and too likely to match
// ordinary text).
const minSecretLen = 8

// Codec redacts known secret values from payload data.
type Codec struct {
	secrets [][]byte
}

// New builds a codec from secret values; short or empty values are ignored.
func New(values ...string) *Codec {
	seen := map[string]bool{}
	c := &Codec{}
	for _, v := range values {
		if len(v) < minSecretLen || seen[v] {
			continue
		}
		seen[v] = true
		c.secrets = append(c.secrets, []byte(v))
	}
	// Longest first, so a secret containing another is redacted whole.
	sort.Slice(c.secrets, func(i, j int) bool { return len(c.secrets[i]) > len(c.secrets[j]) })
	return c
}

// FromConfig collects the resolvable secrets of a config file: provider
// auth tokens and model_settings header values, MCP header values and
// telemetry headers, resolved with
// lookup (unresolvable ones are skipped; they cannot leak).
func FromConfig(f *config.File, lookup func(string) (string, bool)) *Codec {
	var vals []string
	add := func(raw string) {
		if v, err := config.ResolveEnvTokens(raw, lookup); err == nil {
			vals = append(vals, v)
		}
	}
	if f != nil {
		for _, p := range f.Providers.Entries {
			add(p.AuthToken)
			for _, h := range p.Settings.Headers {
				add(h)
			}
		}
		for _, m := range f.MCP.Servers {
			for _, h := range m.Headers {
				add(h)
			}
		}
		for _, h := range f.Telemetry.OTLPHeaders {
			add(h)
		}
	}
	return New(vals...)
}

// Marker replaces redacted values.
var Marker = []byte(config.Redacted)

// Encode implements converter.PayloadCodec.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	for _, p := range payloads {
		for _, s := range c.secrets {
			if bytes.Contains(p.Data, s) {
				p.Data = bytes.ReplaceAll(p.Data, s, Marker)
			}
		}
	}
	return payloads, nil
}

// Decode implements converter.PayloadCodec; redaction is one-way.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return payloads, nil
}

// DataConverter wraps the default converter with the codec.
func (c *Codec) DataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}
