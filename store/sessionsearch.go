package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// SessionFilter narrows SearchSessions. Empty fields match everything.
type SessionFilter struct {
	State     string
	ProfileID string
	// IDPrefix matches session ids starting with it (LIKE wildcards in it
	// are taken literally).
	IDPrefix string
}

// SearchSessions pages sessions newest first: before is the seq to start
// below (0 = from the newest), and NextCursor is the seq to pass next.
func (s *Store) SearchSessions(ctx context.Context, f SessionFilter, before int64, limit int) (Page[Session], error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	prefix := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(f.IDPrefix)
	rows, err := s.Pool.Query(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE ($1 = '' OR state = $1) AND ($2 = '' OR profile_id = $2) AND ($3 = '' OR id LIKE $3 || '%') AND seq < $4
		ORDER BY seq DESC LIMIT $5`, f.State, f.ProfileID, prefix, before, limit+1)
	if err != nil {
		return Page[Session]{}, fmt.Errorf("search sessions: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Session, error) { return scanSession(r) })
	if err != nil {
		return Page[Session]{}, fmt.Errorf("search sessions: %w", err)
	}
	if len(list) <= limit {
		if list == nil {
			list = []Session{}
		}
		return Page[Session]{Items: list}, nil
	}
	list = list[:limit]
	c := strconv.FormatInt(list[len(list)-1].Seq, 10)
	return Page[Session]{Items: list, NextCursor: &c}, nil
}
