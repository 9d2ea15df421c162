package api

import (
	"net/http"

	"github.com/bae-go/bae-go/api/wire"
)

// pageParams parses ?cursor=&limit= (see wire.ParsePage); errors are 400s.
func pageParams(r *http.Request) (after int64, limit int, p *Problem) {
	after, limit, err := wire.ParsePage(r.URL.Query())
	if err != nil {
		return 0, 0, badRequest(err.Error())
	}
	return after, limit, nil
}

type pageBody[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}
