package console

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
)

// LoadPassword returns the console password: BAE_CONSOLE_PASSWORD when set,
// else the password file's content, else a new random password written to
// the password file (0600), as the admin key is on first boot.
func LoadPassword(c config.Console, log *slog.Logger) (string, error) {
	if c.Password != "" {
		return c.Password, nil
	}
	pw, err := adminkey.ReadKeyFile(c.PasswordFile)
	switch {
	case err == nil && pw != "":
		if info, serr := os.Stat(c.PasswordFile); serr == nil && info.Mode().Perm()&0o077 != 0 {
			log.Warn("console password file is readable by other users; chmod 600 it", "path", c.PasswordFile, "mode", info.Mode().Perm().String())
		}
		return pw, nil
	case err == nil:
		return "", emptyPasswordFile(c.PasswordFile)
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("read console password file: %w", err)
	}
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate console password: %w", err)
	}
	pw = base64.RawURLEncoding.EncodeToString(b)
	if err := adminkey.WriteSecretFile(c.PasswordFile, pw+"\n"); err != nil {
		return "", err
	}
	log.Info("no console password set; generated one, written to file", "path", c.PasswordFile)
	return pw, nil
}

// CheckPasswordFile reports a password file that LoadPassword would refuse
// (one that exists but is empty), without writing anything, so baesrv can
// refuse it before it starts.
func CheckPasswordFile(c config.Console) error {
	if c.Password != "" {
		return nil
	}
	if pw, err := adminkey.ReadKeyFile(c.PasswordFile); err == nil && pw == "" {
		return emptyPasswordFile(c.PasswordFile)
	}
	return nil
}

func emptyPasswordFile(path string) error {
	return &config.ValidationError{Msg: fmt.Sprintf("console password file %s is empty; delete it to generate a new password", path)}
}
