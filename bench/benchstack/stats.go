package benchstack

import (
	"slices"
	"syscall"
	"time"
)

// Dist is a latency distribution in milliseconds (nearest-rank quantiles).
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// Summarise is ds's distribution.
func Summarise(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return Ms(s[max(0, min(i, len(s)-1))])
	}
	return Dist{N: len(s), Mean: Ms(sum / time.Duration(len(s))), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: Ms(s[len(s)-1])}
}

// Ms is d in milliseconds, to the microsecond.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ProcessCPU is the CPU time (user + system) this process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
