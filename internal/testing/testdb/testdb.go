// Package testdb creates throwaway PostgreSQL databases for tests.
package testdb

import (
	"context"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/ids"
)

// BaseDatabaseURL is the maintenance database tests create their own
// databases from (BAE_TEST_DATABASE_URL overrides).
func BaseDatabaseURL() string {
	if u := os.Getenv("BAE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// NewDatabase creates an empty database for t and drops it afterwards.
func New(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	base := BaseDatabaseURL()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err, "PostgreSQL must be running (scripts/pg-up.sh)")
	defer conn.Close(ctx)
	name := "bae_test_" + ids.New("")[:16]
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}
