package compaction

import (
	"math"
	"strings"
)

// DefaultContextWindow is the window assumed for a model of no known
// family: small enough that an unknown model is compacted early rather
// than refused.
const DefaultContextWindow = 32_000

// ContextWindow is the default window, in tokens, of a model by its family.
func ContextWindow(model string) int {
	m := strings.ToLower(model)
	has := func(prefixes ...string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(m, p) {
				return true
			}
		}
		return false
	}
	switch {
	case has("claude-"):
		return 200_000
	case has("gpt-4.1"):
		return 1_047_576
	case has("gpt-5"):
		return 400_000
	case has("gpt-4o", "o1", "o3", "o4", "gpt-4-turbo"):
		return 128_000
	case has("gpt-3.5"):
		return 16_385
	case has("gpt-4"):
		return 8_192
	}
	return DefaultContextWindow
}

// Budget is how many input tokens a request may carry: the window minus
// the output reserve (max_tokens). Never below a small floor, so a
// misconfigured entry still lets a turn try.
func Budget(window, maxTokens int) int {
	return max(window-maxTokens, 256)
}

// DefaultBytesPerToken is the estimate before any provider reported its
// count: about three bytes of JSON a token, more tokens than most
// tokenizers count for English text, so an uncalibrated estimate errs
// towards compacting early.
const DefaultBytesPerToken = 3.0

// Estimator turns request bytes into tokens. BytesPerToken comes from
// Calibrate: the provider's own usage.input_tokens for a request of known
// size.
type Estimator struct {
	BytesPerToken float64 // 0 = DefaultBytesPerToken
}

// margin is the share the estimate adds on top of the calibrated ratio:
// the next request's text need not tokenize like the last one's.
const margin = 1.1

// Tokens estimates a request of n bytes.
func (e Estimator) Tokens(n int) int {
	bpt := e.BytesPerToken
	if bpt <= 0 {
		bpt = DefaultBytesPerToken
	}
	return int(math.Ceil(float64(n)/bpt*margin)) + 8
}

// Calibrate folds one observation (a request of n bytes the provider
// counted as tokens) into the ratio. The result moves half way to the
// observation, so it converges within a few turns and one odd request
// does not swing it.
func Calibrate(prev float64, n, tokens int) float64 {
	if n <= 0 || tokens <= 0 {
		return prev
	}
	obs := float64(n) / float64(tokens)
	obs = min(max(obs, 0.5), 16)
	if prev <= 0 {
		return obs
	}
	return (prev + obs) / 2
}
