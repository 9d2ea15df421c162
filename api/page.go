package api

import (
	"fmt"
	"net/http"
	"strconv"
)

// Pagination limits shared by every list endpoint.
const (
	defaultLimit = 50
	maxLimit     = 200
)

// pageParams parses ?cursor=&limit=. An empty cursor starts at the beginning;
// a malformed cursor or a non-positive limit is a 400; an oversized limit is
// capped.
func pageParams(r *http.Request) (after int64, limit int, p *Problem) {
	q := r.URL.Query()
	if c := q.Get("cursor"); c != "" {
		v, err := strconv.ParseInt(c, 10, 64)
		if err != nil || v < 0 {
			return 0, 0, badRequest(fmt.Sprintf("invalid cursor: %q", c))
		}
		after = v
	}
	limit = defaultLimit
	if l, ok := q["limit"]; ok && len(l) > 0 && l[0] != "" {
		v, err := strconv.Atoi(l[0])
		if err != nil || v <= 0 {
			return 0, 0, badRequest("limit must be a positive integer")
		}
		limit = min(v, maxLimit)
	}
	return after, limit, nil
}

type pageBody[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}
