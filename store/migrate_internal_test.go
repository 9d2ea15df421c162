package store

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMigrationVersionsAreUnique(t *testing.T) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	require.NoError(t, err)
	migs, err := migrationVersions(files)
	require.NoError(t, err, "the repository's migrations")
	require.NotEmpty(t, migs)
	for i := 1; i < len(migs); i++ {
		assert.Less(t, migs[i-1].version, migs[i].version)
	}

	_, err = migrationVersions([]string{"migrations/0004_a.sql", "migrations/0005_b.sql", "migrations/0004_c.sql"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "share version 4")
	_, err = migrationVersions([]string{"migrations/x_a.sql"})
	assert.Error(t, err)
}
