package config

import (
	"math"

	"github.com/bae-go/bae-go/internal/provider"
)

// Price is a provider entry's optional price table ([providers.entries.price]),
// in USD per million tokens of each kind a call reports.
type Price struct {
	Input      float64 `toml:"input"`
	Output     float64 `toml:"output"`
	CacheRead  float64 `toml:"cache_read"`
	CacheWrite float64 `toml:"cache_write"`
}

// NanoUSDPerUSD is how costs are counted: whole nano-dollars (USD 1e-9), so
// sums are exact integers.
const NanoUSDPerUSD = 1e9

// maxPrice bounds a price (USD per million tokens), far above any model's,
// so a cost can never overflow its counter.
const maxPrice = 1e6

// Cost is what u costs at p, in nano-dollars (0 for a nil price table).
func (p *Price) Cost(u provider.Usage) int64 {
	if p == nil {
		return 0
	}
	// USD per million tokens is 1000 nano-dollars per token.
	c := float64(u.Input)*p.Input + float64(u.Output)*p.Output + float64(u.CacheRead)*p.CacheRead + float64(u.CacheWrite)*p.CacheWrite
	return int64(math.Round(c * 1000))
}

func checkPrice(name string, p *Price) error {
	if p == nil {
		return nil
	}
	for field, v := range map[string]float64{"input": p.Input, "output": p.Output, "cache_read": p.CacheRead, "cache_write": p.CacheWrite} {
		if math.IsNaN(v) || v < 0 || v > maxPrice {
			return invalidf("provider %q has price.%s %v out of range (USD per million tokens, 0 to %g)", name, field, v, float64(maxPrice))
		}
	}
	return nil
}
