package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
)

// Key roles.
const (
	RoleAdmin   = "admin"
	RoleClient  = "client"
	RoleSession = "session"
)

// Key is a stored key row (never the plaintext).
type Key struct {
	Seq         int64
	ID          string
	Role        string
	Name        string
	Prefix      string
	Hash        string
	ProfileID   string
	SessionID   string
	ClientKeyID string
	CreatedAt   time.Time
	LastUsedAt  *time.Time
}

const keyCols = `seq, id, role, name, prefix, key_hash, coalesce(profile_id, ''), coalesce(session_id, ''), coalesce(client_key_id, ''), created_at, last_used_at`

func scanKey(row pgx.Row) (Key, error) {
	var k Key
	err := row.Scan(&k.Seq, &k.ID, &k.Role, &k.Name, &k.Prefix, &k.Hash, &k.ProfileID, &k.SessionID, &k.ClientKeyID, &k.CreatedAt, &k.LastUsedAt)
	return k, err
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// NewClientKey mints a client key for a live profile. The plaintext is
// returned once and never stored.
func (s *Store) NewClientKey(ctx context.Context, name, profileID string) (Key, string, error) {
	// An Argon2id key is found by its prefix, which names at most one live
	// key: a secret whose prefix is taken is drawn again (a 1 in 65536
	// chance per live key).
	for range maxPrefixDraws {
		secret := ids.NewSecret(ids.ClientKeyPrefix)
		hash, err := s.hashNewKey(secret)
		if err != nil {
			return Key{}, "", err
		}
		var k Key
		err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			var ok bool
			if err := tx.QueryRow(ctx, `SELECT true FROM profiles WHERE id = $1 AND deleted_at IS NULL FOR SHARE`, profileID).Scan(&ok); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return ErrNotFound
				}
				return fmt.Errorf("check profile: %w", err)
			}
			prefix := ids.DisplayPrefix(secret, ids.ClientKeyPrefix)
			if keyhash.IsArgon2id(hash) {
				if taken, err := clientPrefixTaken(ctx, tx, prefix); err != nil || taken {
					return cmp.Or(err, errPrefixTaken)
				}
			}
			var err error
			k, err = insertKeyHash(ctx, tx, RoleClient, name, hash, prefix, profileID, "", "")
			if isUniqueViolation(err) {
				return errPrefixTaken
			}
			return err
		})
		if errors.Is(err, errPrefixTaken) {
			continue
		}
		if err != nil {
			return Key{}, "", err
		}
		s.remember(secret, k)
		return k, secret, nil
	}
	return Key{}, "", fmt.Errorf("mint client key: no free key prefix in %d draws", maxPrefixDraws)
}

// maxPrefixDraws bounds NewClientKey's draws for a free prefix.
const maxPrefixDraws = 16

var errPrefixTaken = errors.New("key prefix taken")

// clientPrefixTaken reports whether a live Argon2id client key holds
// prefix (the unique index keys_client_prefix covers rows written since
// migration 0014; this also sees older rows that share a prefix).
func clientPrefixTaken(ctx context.Context, q dbtx, prefix string) (bool, error) {
	var taken bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM keys WHERE role = 'client' AND deleted_at IS NULL
		AND prefix = $1 AND key_hash LIKE '$argon2id$%')`, prefix).Scan(&taken)
	if err != nil {
		return false, fmt.Errorf("check key prefix: %w", err)
	}
	return taken, nil
}

func insertKeyHash(ctx context.Context, q dbtx, role, name, hash, prefix, profileID, sessionID, clientKeyID string) (Key, error) {
	k, err := scanKey(q.QueryRow(ctx, `INSERT INTO keys (id, role, name, prefix, key_hash, profile_id, session_id, client_key_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+keyCols,
		ids.New(ids.KeyIDPrefix), role, name, prefix, hash, nullable(profileID), nullable(sessionID), nullable(clientKeyID)))
	if err != nil {
		return Key{}, fmt.Errorf("insert %s key: %w", role, err)
	}
	return k, nil
}

// ListClientKeys pages active client keys.
func (s *Store) ListClientKeys(ctx context.Context, after int64, limit int) (Page[Key], error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+keyCols+` FROM keys WHERE role = 'client' AND deleted_at IS NULL AND seq > $1 ORDER BY seq LIMIT $2`, after, limit+1)
	if err != nil {
		return Page[Key]{}, fmt.Errorf("list keys: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) { return scanKey(r) })
	if err != nil {
		return Page[Key]{}, fmt.Errorf("list keys: %w", err)
	}
	return pageOf(list, limit, func(k Key) int64 { return k.Seq }), nil
}

// Authenticate finds the active key of role whose hash matches secret and
// stamps last_used_at. A session key is active only while the client key it
// was minted for is too. A "sha256:" key is found by its hash (so timing
// reveals nothing about the stored secret; the final comparison is
// constant-time regardless). An Argon2id key is found by its display prefix
// and verified once per process; after that the secret's SHA-256 names the
// row in verifiedKeys and the request costs what a "sha256:" key costs.
// Either way the row is read, unrevoked, on every request.
func (s *Store) Authenticate(ctx context.Context, role, secret string) (Key, error) {
	h := ids.HashSecret(secret)
	d := tokenDigest(secret)
	cached, isCached := s.verified.get(d)
	// last_used_at is stamped at most every 30 s per key: a write on every
	// request would cost more than the lookup itself. Argon2id candidates
	// (read only when the secret is not cached) are stamped once verified.
	// A session key is active only while the client key it was minted for is.
	rows, err := s.Pool.Query(ctx, `WITH found AS (
			SELECT `+keyCols+` FROM keys WHERE role = $2 AND deleted_at IS NULL
			  AND (key_hash = $1 OR id = $3 OR ($3 = '' AND prefix = ANY($4) AND key_hash LIKE '$argon2id$%'))
			  AND (role <> 'session' OR EXISTS (SELECT 1 FROM keys ck
			       WHERE ck.id = keys.client_key_id AND ck.role = 'client' AND ck.deleted_at IS NULL))
		), stamp AS (
			UPDATE keys SET last_used_at = now() WHERE id IN (SELECT id FROM found WHERE key_hash = $1 OR id = $3)
			  AND (last_used_at IS NULL OR last_used_at < now() - interval '30 seconds')
		)
		SELECT * FROM found`, h, role, cached.id, lookupPrefixes(role, secret))
	if err != nil {
		return Key{}, fmt.Errorf("authenticate key: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) { return scanKey(r) })
	if err != nil {
		return Key{}, fmt.Errorf("authenticate key: %w", err)
	}
	k, verify, ok := matchKey(list, h, cached, isCached)
	if ok {
		return k, nil
	}
	if isCached {
		// The cached row is gone, revoked or rehashed.
		s.verified.drop(d)
	}
	// A request verifies at most maxPrefixCandidates Argon2id hashes. A live
	// client prefix now names one key, but keys stored before that rule may
	// share one (see migration 0014), and an admin key being rotated shares
	// BAE's eight-character prefix with its successor; those keep working.
	// More candidates than that can only have been planted: none is verified.
	if verify = oneHash(verify); len(verify) > maxPrefixCandidates {
		return Key{}, ErrNotFound
	}
	for _, k := range verify {
		if ok, _ := s.hasher.VerifyPHC(k.Hash, secret); !ok {
			continue
		}
		s.remember(secret, k)
		if _, err := s.Pool.Exec(ctx, `UPDATE keys SET last_used_at = now() WHERE id = $1
			AND (last_used_at IS NULL OR last_used_at < now() - interval '30 seconds')`, k.ID); err != nil {
			return Key{}, fmt.Errorf("stamp key use: %w", err)
		}
		return k, nil
	}
	return Key{}, ErrNotFound
}

// matchKey picks the row a secret (its SHA-256 form h) names without an
// Argon2id: a "sha256:" row with that hash, or the cached row still holding
// the hash it was verified against. Otherwise it returns the Argon2id rows
// left to verify.
func matchKey(list []Key, h string, cached verifiedKey, isCached bool) (Key, []Key, bool) {
	var verify []Key
	for _, k := range list {
		if ids.EqualHash(k.Hash, h) {
			return k, nil, true
		}
		if isCached && k.ID == cached.id && k.Hash == cached.hash {
			return k, nil, true
		}
		if keyhash.IsArgon2id(k.Hash) {
			verify = append(verify, k)
		}
	}
	return Key{}, verify, false
}

// maxPrefixCandidates bounds the Argon2id hashes one request verifies
// (each costs up to keyhash's bounded memory and time).
const maxPrefixCandidates = 4

// SharedPrefixKeys returns the live client keys that share their prefix
// with another live Argon2id client key (rows stored before migration
// 0014): each costs a request under that prefix one more verification, and
// Authenticate refuses them all when more than maxPrefixCandidates do.
func (s *Store) SharedPrefixKeys(ctx context.Context) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id FROM keys k WHERE shared_prefix AND role = 'client' AND deleted_at IS NULL
		AND EXISTS (SELECT 1 FROM keys o WHERE o.id <> k.id AND o.role = 'client' AND o.deleted_at IS NULL
		            AND o.prefix = k.prefix AND o.key_hash LIKE '$argon2id$%')
		ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("list shared key prefixes: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list shared key prefixes: %w", err)
	}
	return ids, nil
}

// oneHash drops candidates carrying a hash already listed (the same admin
// hash file loaded twice is one key to verify).
func oneHash(list []Key) []Key {
	out := list[:0:0]
	for _, k := range list {
		if !slices.ContainsFunc(out, func(o Key) bool { return o.Hash == k.Hash }) {
			out = append(out, k)
		}
	}
	return out
}

// ActiveAdminKeys returns every active admin key row.
func (s *Store) ActiveAdminKeys(ctx context.Context) ([]Key, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+keyCols+` FROM keys WHERE role = 'admin' AND deleted_at IS NULL ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("list admin keys: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) { return scanKey(r) })
}

// InsertAdminKey stores a freshly minted admin key, hashed by the store's
// hasher.
func (s *Store) InsertAdminKey(ctx context.Context, name, secret string) (Key, error) {
	hash, err := s.hashNewKey(secret)
	if err != nil {
		return Key{}, err
	}
	k, err := insertKeyHash(ctx, s.Pool, RoleAdmin, name, hash, ids.DisplayPrefix(secret, ids.AdminKeyPrefix), "", "", "")
	if err != nil {
		return Key{}, err
	}
	s.remember(secret, k)
	return k, nil
}

// InsertAdminKeyHash stores an admin key given only its hash.
func (s *Store) InsertAdminKeyHash(ctx context.Context, name, hash, prefix string) (Key, error) {
	return insertKeyHash(ctx, s.Pool, RoleAdmin, name, hash, prefix, "", "", "")
}

// RevokeAdminKeys soft-deletes every active admin key.
func (s *Store) RevokeAdminKeys(ctx context.Context) error {
	_, err := s.Pool.Exec(ctx, `UPDATE keys SET deleted_at = now() WHERE role = 'admin' AND deleted_at IS NULL`)
	if err != nil {
		return fmt.Errorf("revoke admin keys: %w", err)
	}
	return nil
}

// RevokeClientKey revokes a client key and cascades: its session keys are
// revoked, and every open session left with no valid session key is closed
// with a session.close (client_key_revoked) event. It returns the ids of the
// sessions it closed.
func (s *Store) RevokeClientKey(ctx context.Context, id string) ([]string, error) {
	var closed []string
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE keys SET deleted_at = now() WHERE id = $1 AND role = 'client' AND deleted_at IS NULL`, id)
		if err != nil {
			return fmt.Errorf("revoke client key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		if _, err := tx.Exec(ctx, `UPDATE keys SET deleted_at = now() WHERE role = 'session' AND client_key_id = $1 AND deleted_at IS NULL`, id); err != nil {
			return fmt.Errorf("revoke session keys: %w", err)
		}
		rows, err := tx.Query(ctx, `UPDATE sessions SET state = 'closed', closed_at = now()
			WHERE state = 'open'
			  AND id IN (SELECT session_id FROM keys WHERE role = 'session' AND client_key_id = $1)
			  AND NOT EXISTS (SELECT 1 FROM keys k WHERE k.role = 'session' AND k.session_id = sessions.id AND k.deleted_at IS NULL)
			RETURNING id`, id)
		if err != nil {
			return fmt.Errorf("close orphaned sessions: %w", err)
		}
		closed, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("close orphaned sessions: %w", err)
		}
		for _, sid := range closed {
			if _, err := appendEnding(ctx, tx, sid, []NewEvent{{ClientKeyID: id, Payload: events.SessionClosePayload{Reason: events.CloseClientKeyRevoked}}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return closed, nil
}
