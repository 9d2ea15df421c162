package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/sandbox"
)

// ErrDuplicateName reports a live profile with the same name.
var ErrDuplicateName = errors.New("duplicate profile name")

// ErrProfileInUse reports a profile that still has active client keys.
var ErrProfileInUse = errors.New("profile in use")

// ProfileInput is the writable part of a profile.
type ProfileInput struct {
	Name               string
	PrimaryProvider    string
	FallbackProviders  []string
	MCPServers         []string
	AllowedTools       []string
	AvailableSandboxes []string
	// Sandbox overrides the server's [sandbox] bounds for this profile's
	// remote sandboxes.
	Sandbox sandbox.Settings
	// Context is the validated compaction policy (nil: the default).
	Context json.RawMessage
	// ModelSettings overrides provider entries' model settings, by entry
	// name; validated (nil: none).
	ModelSettings json.RawMessage
	// Approvals is the validated approval policy (nil: none).
	Approvals json.RawMessage
}

// Profile is a stored profile (the admin API shows it as wire.Profile):
// its input as stored, under its id.
type Profile struct {
	Seq int64
	ID  string
	ProfileInput
	CreatedAt time.Time
	UpdatedAt time.Time
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

const profileCols = `seq, id, name, primary_provider, fallback_providers, mcp_servers, allowed_tools, available_sandboxes, sandbox, context, model_settings, approvals, created_at, updated_at`

func scanProfile(row pgx.Row) (Profile, error) {
	var p Profile
	err := row.Scan(&p.Seq, &p.ID, &p.Name, &p.PrimaryProvider, &p.FallbackProviders, &p.MCPServers, &p.AllowedTools, &p.AvailableSandboxes, &p.Sandbox, &p.Context, &p.ModelSettings, &p.Approvals, &p.CreatedAt, &p.UpdatedAt)
	return p, err
}

// contextArg stores a policy (context, model settings or approvals) as
// jsonb, or NULL for the default (none).
func contextArg(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// CreateProfile inserts a profile.
func (s *Store) CreateProfile(ctx context.Context, in ProfileInput) (Profile, error) {
	id := ids.New(ids.ProfilePrefix)
	row := s.Pool.QueryRow(ctx, `INSERT INTO profiles (id, name, primary_provider, fallback_providers, mcp_servers, allowed_tools, available_sandboxes, sandbox, context, model_settings, approvals)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING `+profileCols,
		id, in.Name, in.PrimaryProvider, nonNil(in.FallbackProviders), nonNil(in.MCPServers), nonNil(in.AllowedTools), nonNil(in.AvailableSandboxes), in.Sandbox, contextArg(in.Context), contextArg(in.ModelSettings), contextArg(in.Approvals))
	p, err := scanProfile(row)
	if isUniqueViolation(err) {
		return Profile{}, ErrDuplicateName
	}
	if err != nil {
		return Profile{}, fmt.Errorf("insert profile: %w", err)
	}
	return p, nil
}

func getProfile(ctx context.Context, q dbtx, id string) (Profile, error) {
	p, err := scanProfile(q.QueryRow(ctx, `SELECT `+profileCols+` FROM profiles WHERE id = $1 AND deleted_at IS NULL`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Profile{}, ErrNotFound
	}
	if err != nil {
		return Profile{}, fmt.Errorf("get profile: %w", err)
	}
	return p, nil
}

// ListProfiles pages live profiles in creation order.
func (s *Store) ListProfiles(ctx context.Context, after int64, limit int) (Page[Profile], error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+profileCols+` FROM profiles WHERE deleted_at IS NULL AND seq > $1 ORDER BY seq LIMIT $2`, after, limit+1)
	if err != nil {
		return Page[Profile]{}, fmt.Errorf("list profiles: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Profile, error) { return scanProfile(r) })
	if err != nil {
		return Page[Profile]{}, fmt.Errorf("list profiles: %w", err)
	}
	return pageOf(list, limit, func(p Profile) int64 { return p.Seq }), nil
}

// AllLiveProfiles returns every live profile (for background provisioning).
func (s *Store) AllLiveProfiles(ctx context.Context) ([]Profile, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+profileCols+` FROM profiles WHERE deleted_at IS NULL ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Profile, error) { return scanProfile(r) })
}

// ReplaceProfile overwrites every writable field and bumps updated_at.
func (s *Store) ReplaceProfile(ctx context.Context, id string, in ProfileInput) (Profile, error) {
	row := s.Pool.QueryRow(ctx, `UPDATE profiles SET name = $2, primary_provider = $3, fallback_providers = $4, mcp_servers = $5,
		allowed_tools = $6, available_sandboxes = $7, sandbox = $8, context = $9, model_settings = $10, approvals = $11, updated_at = now()
		WHERE id = $1 AND deleted_at IS NULL RETURNING `+profileCols,
		id, in.Name, in.PrimaryProvider, nonNil(in.FallbackProviders), nonNil(in.MCPServers), nonNil(in.AllowedTools), nonNil(in.AvailableSandboxes), in.Sandbox, contextArg(in.Context), contextArg(in.ModelSettings), contextArg(in.Approvals))
	p, err := scanProfile(row)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Profile{}, ErrNotFound
	case isUniqueViolation(err):
		return Profile{}, ErrDuplicateName
	case err != nil:
		return Profile{}, fmt.Errorf("replace profile: %w", err)
	}
	return p, nil
}

// DeleteProfile soft-deletes a profile that has no active client keys.
func (s *Store) DeleteProfile(ctx context.Context, id string) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT true FROM profiles WHERE id = $1 AND deleted_at IS NULL FOR UPDATE`, id).Scan(&exists); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("lock profile: %w", err)
		}
		var active int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM keys WHERE role = 'client' AND profile_id = $1 AND deleted_at IS NULL`, id).Scan(&active); err != nil {
			return fmt.Errorf("count profile keys: %w", err)
		}
		if active > 0 {
			return ErrProfileInUse
		}
		if _, err := tx.Exec(ctx, `UPDATE profiles SET deleted_at = now() WHERE id = $1`, id); err != nil {
			return fmt.Errorf("delete profile: %w", err)
		}
		return nil
	})
}
