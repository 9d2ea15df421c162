package app

import (
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the garbage collector's target baesrv runs with when
// GOGC is unset: the heap may grow to five times what is live before a
// collection. A server's live heap is small next to the memory it is given
// (tens of MiB with 10,000 open sessions), and at Go's default of 100 the
// collections' pauses and assists land on turns: bench/turns at 40 turns/s
// measured p99 17-24 ms in five runs at 400 against 24-60 ms in four at 100
// (p50 and capacity did not move beyond the noise). GOGC, and GOMEMLIMIT
// beside it, are the usual controls.
const DefaultGCPercent = 400

// TuneGC applies DefaultGCPercent unless GOGC is set, and returns the
// percentage in force (-1 when collection is off).
func TuneGC(lookup func(string) (string, bool)) int {
	if v, ok := lookup("GOGC"); ok && strings.TrimSpace(v) != "" {
		if strings.EqualFold(strings.TrimSpace(v), "off") {
			return -1
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 100 // the runtime ignores a GOGC it cannot parse
		}
		return n
	}
	debug.SetGCPercent(DefaultGCPercent)
	return DefaultGCPercent
}
