// Package adminkey bootstraps and verifies the admin-port credential.
//
// On first boot the server mints a bae_admin_ key, writes the plaintext to
// the key file (0600) and stores only its hash. A pre-provisioned hash file
// lets several replicas share one key without ever seeing its plaintext.
package adminkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/store"
)

// UsageError is a startup error the operator must fix (exit code 2).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Options select the bootstrap path.
type Options struct {
	KeyFile  string
	HashFile string
	Rotate   bool
	Disabled bool
}

// HashFile is the pre-provisioned hash document.
type HashFile struct {
	KeyHash string `json:"key_hash"`
	Prefix  string `json:"prefix"`
	Name    string `json:"name,omitempty"`
}

// ValidHash accepts our SHA-256 form and Argon2id PHC strings.
func ValidHash(h string) bool { return keyhash.Valid(h) }

// Bootstrap ensures an admin key exists according to opts.
func Bootstrap(ctx context.Context, st *store.Store, opts Options, log *slog.Logger) error {
	if opts.Disabled {
		if opts.Rotate {
			return &UsageError{Msg: "--rotate-admin-key cannot be combined with --dangerously-disable-admin-auth"}
		}
		log.Warn("admin API authentication is DISABLED (--dangerously-disable-admin-auth) — anyone able to reach the admin port has full control")
		return nil
	}
	if opts.Rotate {
		if err := st.RevokeAdminKeys(ctx); err != nil {
			return err
		}
		if err := os.Remove(opts.KeyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove old admin key file: %w", err)
		}
		if err := generate(ctx, st, opts.KeyFile); err != nil {
			return err
		}
		log.Info("admin key rotated", "path", opts.KeyFile)
		return nil
	}
	active, err := st.ActiveAdminKeys(ctx)
	if err != nil {
		return err
	}
	if len(active) > 0 {
		if _, err := os.Stat(opts.KeyFile); errors.Is(err, os.ErrNotExist) {
			// Typical after pointing a fresh data dir at an existing
			// database: the key exists, but nobody here can read it.
			log.Warn("an admin key exists in the database but the key file is missing; restart once with --rotate-admin-key to mint a new one (or use the key you provisioned)", "path", opts.KeyFile)
		}
		return nil
	}
	if hf, err := readHashFile(opts.HashFile); err != nil {
		return err
	} else if hf != nil {
		name := hf.Name
		if name == "" {
			name = "pre-provisioned"
		}
		if _, err := st.InsertAdminKeyHash(ctx, name, hf.KeyHash, hf.Prefix); err != nil {
			return err
		}
		log.Info("admin key hash loaded from pre-provisioned file", "path", opts.HashFile)
		return nil
	}
	if err := generate(ctx, st, opts.KeyFile); err != nil {
		return err
	}
	log.Info("no admin key found; generated new admin key, written to file", "path", opts.KeyFile)
	return nil
}

func readHashFile(path string) (*HashFile, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &UsageError{Msg: fmt.Sprintf("read admin key hash file %s: %v", path, err)}
	}
	var hf HashFile
	if err := json.Unmarshal(b, &hf); err != nil {
		return nil, &UsageError{Msg: fmt.Sprintf("admin key hash file %s is not valid JSON: %v", path, err)}
	}
	if hf.KeyHash == "" || hf.Prefix == "" {
		return nil, &UsageError{Msg: fmt.Sprintf("admin key hash file %s must carry key_hash and prefix", path)}
	}
	if !ValidHash(hf.KeyHash) {
		return nil, &UsageError{Msg: fmt.Sprintf("admin key hash file %s: key_hash is neither sha256:<hex> nor an Argon2id PHC string", path)}
	}
	return &hf, nil
}

// NewPair mints an admin key and its hash document, hashed by h.
func NewPair(name string, h keyhash.Hasher) (string, HashFile, error) {
	secret := ids.NewSecret(ids.AdminKeyPrefix)
	hash, err := h.Hash(secret)
	if err != nil {
		return "", HashFile{}, err
	}
	return secret, HashFile{KeyHash: hash, Prefix: ids.DisplayPrefix(secret, ids.AdminKeyPrefix), Name: name}, nil
}

func generate(ctx context.Context, st *store.Store, keyFile string) error {
	secret := ids.NewSecret(ids.AdminKeyPrefix)
	if err := WriteSecretFile(keyFile, secret+"\n"); err != nil {
		return err
	}
	_, err := st.InsertAdminKey(ctx, "bootstrap", secret)
	return err
}

// WriteSecretFile writes content with 0600 permissions, creating parents.
func WriteSecretFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create directory for %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadKeyFile reads a plaintext key file, trimming whitespace.
func ReadKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
