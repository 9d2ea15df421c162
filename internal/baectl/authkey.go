package baectl

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/spf13/pflag"
)

// Output file names of `auth create key`, matching the server's defaults
// under BAE_DATA_DIR.
const (
	keyFileName  = "admin-key.pem"
	hashFileName = "admin-key-hash.pem"
)

// authCreateKeyCmd mints an admin key pair locally. It never calls the
// server: the hash file is what replicas ingest at first boot through
// BAE_ADMIN_KEY_HASH_FILE, and the plaintext is what operators keep.
func authCreateKeyCmd(fs *pflag.FlagSet) runFunc {
	name := fs.String("name", "provisioned-admin", "`NAME` recorded in the hash file (display only)")
	outDir := fs.String("out-dir", ".", "existing `DIR` to write admin-key.pem and admin-key-hash.pem into")
	scheme := fs.String("hash", keyhash.SchemeArgon2id, "`SCHEME` of the stored hash: argon2id (BAE's PHC form and costs) or sha256")
	return func(_ context.Context, e *invocation, _ []string) error {
		if strings.TrimSpace(*name) == "" {
			return usagef("--name must not be blank")
		}
		hasher, err := keyhash.ForScheme(*scheme)
		if err != nil {
			return usagef("--hash: %v", err)
		}
		// A missing directory is an error rather than created on the fly: a
		// typo should not scatter a live credential into a fresh tree.
		st, err := os.Stat(*outDir)
		if err != nil {
			return fmt.Errorf("--out-dir %s: %w", *outDir, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("--out-dir %s is not a directory", *outDir)
		}
		secret, hash, err := adminkey.NewPair(*name, hasher)
		if err != nil {
			return fmt.Errorf("hash admin key: %w", err)
		}
		doc, err := json.MarshalIndent(hash, "", "  ")
		if err != nil {
			return fmt.Errorf("encode hash file: %w", err)
		}
		keyPath := filepath.Join(*outDir, keyFileName)
		hashPath := filepath.Join(*outDir, hashFileName)
		if err := adminkey.WriteSecretFile(keyPath, secret+"\n"); err != nil {
			return fmt.Errorf("write admin key: %w", err)
		}
		if err := adminkey.WriteSecretFile(hashPath, string(doc)+"\n"); err != nil {
			return fmt.Errorf("write admin key hash: %w", err)
		}
		fmt.Fprintln(e.stdout, keyPath)
		fmt.Fprintln(e.stdout, hashPath)
		fmt.Fprintf(e.stderr, `baectl: %s is the live admin credential (prefix %s) — treat it like a password;
        point BAE_ADMIN_KEY_FILE (or --admin-key-file) at it wherever baectl runs.
baectl: %s holds only its hash — place it on every replica before its first boot, at
        BAE_ADMIN_KEY_HASH_FILE (default <BAE_DATA_DIR>/admin-key-hash.pem).
`, keyPath, hash.Prefix, hashPath)
		return nil
	}
}
