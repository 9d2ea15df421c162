// Command keyauth measures what authenticating one request costs with each
// stored key form: a "sha256:" key, an Argon2id key (BAE's costs) the
// server has verified once and remembers, and an Argon2id key verified on
// every request (what BAE does, and what the cache saves).
//
//	go run ./bench/keyauth [-n 2000] [-slow 5]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/store"
)

func main() {
	n := flag.Int("n", 2000, "requests per fast case")
	slow := flag.Int("slow", 5, "requests for the uncached Argon2id case")
	base := flag.String("db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server to create a scratch database on")
	flag.Parse()
	if err := run(*base, *n, *slow); err != nil {
		fmt.Fprintln(os.Stderr, "keyauth:", err)
		os.Exit(1)
	}
}

func run(base string, n, slow int) error {
	ctx := context.Background()
	db, err := benchstack.CreateDatabase(ctx, base, "bae_bench_keyauth_", nil)
	if err != nil {
		return err
	}
	defer db.Drop() //nolint:errcheck
	open := func(h keyhash.Hasher, cache int) (*store.Store, error) {
		return store.Open(ctx, db.URL, store.Options{MaxConns: 2, KeyHasher: h, VerifiedKeyCacheSize: cache})
	}
	argon := keyhash.Argon2id{Params: keyhash.BAEParams}
	minter, err := open(argon, 0)
	if err != nil {
		return err
	}
	defer minter.Close()
	sha, err := open(keyhash.SHA256{}, 0)
	if err != nil {
		return err
	}
	defer sha.Close()
	p, err := minter.CreateProfile(ctx, store.ProfileInput{Name: "bench", PrimaryProvider: "x"})
	if err != nil {
		return err
	}
	_, shaKey, err := sha.NewClientKey(ctx, "sha", p.ID)
	if err != nil {
		return err
	}
	_, a1, err := minter.NewClientKey(ctx, "a1", p.ID)
	if err != nil {
		return err
	}
	_, a2, err := minter.NewClientKey(ctx, "a2", p.ID)
	if err != nil {
		return err
	}
	// A second replica: it did not mint the Argon2id keys.
	cached, err := open(argon, 0)
	if err != nil {
		return err
	}
	defer cached.Close()
	// A replica whose cache holds one entry, asked for two keys in turn:
	// every request verifies with Argon2id.
	uncached, err := open(argon, 1)
	if err != nil {
		return err
	}
	defer uncached.Close()

	measure := func(st *store.Store, keys []string, reqs int) (time.Duration, error) {
		start := time.Now()
		for i := 0; i < reqs; i++ {
			if _, err := st.Authenticate(ctx, store.RoleClient, keys[i%len(keys)]); err != nil {
				return 0, err
			}
		}
		return time.Since(start) / time.Duration(reqs), nil
	}
	first, err := measure(cached, []string{a1}, 1)
	if err != nil {
		return err
	}
	rows := []struct {
		name string
		st   *store.Store
		keys []string
		reqs int
	}{
		{"sha256 key", sha, []string{shaKey}, n},
		{"argon2id key, verified once (cached)", cached, []string{a1}, n},
		{"argon2id key, verified every request", uncached, []string{a1, a2}, slow},
	}
	fmt.Printf("%-40s %12s %8s\n", "case", "per request", "requests")
	fmt.Printf("%-40s %12s %8d\n", "argon2id key, first request (verifies)", first.Round(time.Microsecond), 1)
	for _, r := range rows {
		d, err := measure(r.st, r.keys, r.reqs)
		if err != nil {
			return err
		}
		fmt.Printf("%-40s %12s %8d\n", r.name, d.Round(time.Microsecond), r.reqs)
	}
	return nil
}
