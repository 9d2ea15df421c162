package store

import (
	"context"
	"fmt"
	"time"
)

// Console logins are stored by the SHA-256 of their random id (idHash) with
// a fingerprint of the password they were made with; the console keeps the
// id itself only in its signed cookie.

// CreateConsoleLogin records a login valid until expires, and forgets logins
// that ran out before now.
func (s *Store) CreateConsoleLogin(ctx context.Context, idHash, password []byte, expires, now time.Time) error {
	if _, err := s.Pool.Exec(ctx, `DELETE FROM console_logins WHERE expires_at <= $1`, now); err != nil {
		return fmt.Errorf("forget expired console logins: %w", err)
	}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO console_logins (id_hash, password, expires_at) VALUES ($1, $2, $3)`,
		idHash, password, expires); err != nil {
		return fmt.Errorf("record console login: %w", err)
	}
	return nil
}

// ConsoleLoginLive reports whether the login is recorded for this password
// and has not run out at now.
func (s *Store) ConsoleLoginLive(ctx context.Context, idHash, password []byte, now time.Time) (bool, error) {
	var live bool
	err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM console_logins WHERE id_hash = $1 AND password = $2 AND expires_at > $3)`,
		idHash, password, now).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("check console login: %w", err)
	}
	return live, nil
}

// EndConsoleLogin forgets one login (logout).
func (s *Store) EndConsoleLogin(ctx context.Context, idHash []byte) error {
	if _, err := s.Pool.Exec(ctx, `DELETE FROM console_logins WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("end console login: %w", err)
	}
	return nil
}

// EndConsoleLoginsExcept forgets every login made with another password
// than this one, so changing the password ends them for good (changing it
// back does not bring them back). It returns how many it ended.
func (s *Store) EndConsoleLoginsExcept(ctx context.Context, password []byte) (int64, error) {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM console_logins WHERE password <> $1`, password)
	if err != nil {
		return 0, fmt.Errorf("end console logins of another password: %w", err)
	}
	return tag.RowsAffected(), nil
}
