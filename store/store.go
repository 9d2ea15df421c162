// Package store is the PostgreSQL persistence layer: profiles, keys, sessions,
// the append-only event log and the conversation sent to providers.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bae-go/bae-go/internal/lib/keyhash"
)

// ErrNotFound is returned when a looked-up row does not exist (or is deleted).
var ErrNotFound = errors.New("not found")

// Store wraps a pgx pool. Its lookups (reads) are the same methods a
// transaction (Tx) has.
type Store struct {
	reads
	Pool *pgxpool.Pool
	url  string
	conv *convCache
	tail *eventTail
	// origin tags this process's own event notices (see Announced).
	origin        string
	onLocalAppend func(sessionID string)
	onTurnResult  func(turnID string, result []byte)
	hasher        keyhash.Hasher
	verified      *verifiedKeys
	calls         *callCounter
	// local are this process's commits of events in flight.
	local *localCommits
}

// Options tune the pool and the in-process caches.
type Options struct {
	MaxConns int32
	// ConversationCacheBytes bounds the encoded conversations kept in
	// memory (0 = DefaultConversationCacheBytes).
	ConversationCacheBytes int
	// KeyHasher writes new keys' hashes (nil = Argon2id with BAE's costs).
	KeyHasher keyhash.Hasher
	// VerifiedKeyCacheSize bounds the secrets remembered as verified
	// against Argon2id hashes (0 = DefaultVerifiedKeyCacheSize).
	VerifiedKeyCacheSize int
}

// Open connects to databaseURL, creating the database first when it does not
// exist (so a fresh machine needs only a running server), and applies
// migrations.
func Open(ctx context.Context, databaseURL string, opts Options) (*Store, error) {
	if err := ensureDatabase(ctx, databaseURL); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	} else if cfg.MaxConns < 20 {
		cfg.MaxConns = 20
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	calls := &callCounter{}
	cfg.ConnConfig.Tracer = calls
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	s := &Store{reads: reads{q: pool}, Pool: pool, url: databaseURL, conv: newConvCache(opts.ConversationCacheBytes),
		tail: newEventTail(), origin: newOrigin(), hasher: opts.KeyHasher, verified: newVerifiedKeys(opts.VerifiedKeyCacheSize), calls: calls, local: newLocalCommits()}
	if s.hasher == nil {
		s.hasher = keyhash.Argon2id{Params: keyhash.BAEParams}
	}
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// URL is the connection string the store was opened with.
func (s *Store) URL() string { return s.url }

// Close releases the pool.
func (s *Store) Close() { s.Pool.Close() }

// ensureDatabase creates the target database via the maintenance database
// "postgres" when connecting reports it missing.
func ensureDatabase(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect to database: %w", err)
	}
	u, perr := url.Parse(databaseURL)
	if perr != nil {
		return fmt.Errorf("parse database url: %w", perr)
	}
	name := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	admin, aerr := pgx.Connect(ctx, u.String())
	if aerr != nil {
		return fmt.Errorf("connect to maintenance database to create %q: %w", name, aerr)
	}
	defer admin.Close(ctx)
	_, cerr := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if cerr != nil && !(errors.As(cerr, &pgErr) && pgErr.Code == "42P04") { // duplicate_database
		return fmt.Errorf("create database %q: %w", name, cerr)
	}
	return nil
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// DeploymentID is the random id of this database.
func (s *Store) DeploymentID(ctx context.Context) (string, error) {
	var id string
	if err := s.Pool.QueryRow(ctx, `SELECT id FROM deployment LIMIT 1`).Scan(&id); err != nil {
		return "", fmt.Errorf("read deployment id: %w", err)
	}
	return id, nil
}
