package app

import (
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the garbage collector's target baesrv runs with when
// GOGC is unset: the heap may grow to five times what is live before a
// collection. A server's live heap is small next to the memory it is given
// (tens of MiB with thousands of open sessions), and at Go's default of 100
// collections took about a tenth of the CPU under load, on every turn's
// critical path; bench/turns measures the difference (GOGC=100 against the
// default). GOGC (or GOMEMLIMIT alongside it) sets the usual controls.
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
