package console_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/console"
	"github.com/bae-go/bae-go/internal/config"
)

func TestLoadPassword(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "console-password.pem")
	pw, err := console.LoadPassword(config.Console{PasswordFile: path}, slog.Default())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(pw), 20)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "generated like the admin key")

	again, err := console.LoadPassword(config.Console{PasswordFile: path}, slog.Default())
	require.NoError(t, err)
	assert.Equal(t, pw, again, "the file is read, not regenerated")

	env, err := console.LoadPassword(config.Console{Password: "from-the-environment", PasswordFile: path}, slog.Default())
	require.NoError(t, err)
	assert.Equal(t, "from-the-environment", env)

	require.NoError(t, os.WriteFile(path, []byte("\n"), 0o600))
	_, err = console.LoadPassword(config.Console{PasswordFile: path}, slog.Default())
	var ve *config.ValidationError
	assert.ErrorAs(t, err, &ve, "an empty file is an operator error, not a blank password")
}
