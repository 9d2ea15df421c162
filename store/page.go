package store

import "strconv"

// Page is one page of a cursor-paginated listing. The cursor is the seq of
// the last row returned; clients treat it as opaque.
type Page[T any] struct {
	Items      []T
	NextCursor *string
}

// pageOf trims a result fetched with limit+1 rows to limit and computes the
// next cursor from the last kept row.
func pageOf[T any](rows []T, limit int, seqOf func(T) int64) Page[T] {
	if len(rows) <= limit {
		if rows == nil {
			rows = []T{}
		}
		return Page[T]{Items: rows}
	}
	rows = rows[:limit]
	c := strconv.FormatInt(seqOf(rows[len(rows)-1]), 10)
	return Page[T]{Items: rows, NextCursor: &c}
}
