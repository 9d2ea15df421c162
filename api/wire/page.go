package wire

import (
	"fmt"
	"net/url"
	"strconv"
)

// Pagination limits shared by every list endpoint.
const (
	DefaultLimit = 50
	MaxLimit     = 200
	// MaxEventsPageBytes bounds one page of a session's events by size as
	// well: a page stops before it (always holding at least one event) and
	// the cursor carries on from there.
	MaxEventsPageBytes = 8 << 20
)

// ParsePage reads ?cursor=&limit=. An empty cursor starts at the beginning;
// a malformed cursor or a non-positive limit is an error (a 400); an
// oversized limit is capped.
func ParsePage(q url.Values) (after int64, limit int, err error) {
	if c := q.Get("cursor"); c != "" {
		v, perr := strconv.ParseInt(c, 10, 64)
		if perr != nil || v < 0 {
			return 0, 0, fmt.Errorf("invalid cursor: %q", c)
		}
		after = v
	}
	limit = DefaultLimit
	if l, ok := q["limit"]; ok && len(l) > 0 && l[0] != "" {
		v, perr := strconv.Atoi(l[0])
		if perr != nil || v <= 0 {
			return 0, 0, fmt.Errorf("limit must be a positive integer")
		}
		limit = min(v, MaxLimit)
	}
	return after, limit, nil
}
