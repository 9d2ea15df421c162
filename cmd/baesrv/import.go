package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bae-go/bae-go/internal/baeimport"
	"github.com/bae-go/bae-go/store"
)

// importCommand is `baesrv import`: it writes straight into the database
// (BAE_DATABASE_URL), in one transaction, so it belongs to the server
// binary, not to baectl, which only speaks the admin API.
func importCommand(stdout, stderr io.Writer, f *cliFlags) *cobra.Command {
	var from string
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "import --from <bae.db>",
		Short: "Import a stopped BAE server's SQLite database: profiles, client keys, sessions and their event logs",
		Long: `import reads the SQLite database of a stopped BAE server (its BAE_DB_PATH)
and brings its profiles, client keys (their hashes as they are, so the keys
keep working) and sessions with their session keys and full event logs into
the database at BAE_DATABASE_URL. Sessions that were open arrive closed,
with a session.close event (reason "imported") at the end of their log.
The whole source is checked before anything is written (a row over the
live limits, a key hash with costs above BAE's, a key or session naming a
profile the file does not hold, an id the target already holds: the file
is refused, naming the row), then written in one transaction: all of it,
or nothing. See docs/operations.md, "Moving from BAE".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(from) == "" {
				return errors.New("--from <path to BAE's database> is required")
			}
			return ran(runImport(cmd, stdout, stderr, f, from, dryRun, asJSON))
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the BAE database file (BAE_DB_PATH of the stopped BAE server)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the database and print what would be imported, writing nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func runImport(cmd *cobra.Command, stdout, stderr io.Writer, f *cliFlags, from string, dryRun, asJSON bool) error {
	srv, _, err := options(f)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st, err := store.Open(ctx, srv.DatabaseURL, store.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	log := newLogger(stderr)
	rep, err := baeimport.Run(ctx, st, baeimport.Options{
		Path: from, DryRun: dryRun, ProgressEvery: 200, MaxPayloadBytes: srv.MaxBodyBytes,
		Progress: func(p baeimport.Progress) {
			log.Info("importing sessions", "done", p.Sessions, "of", p.TotalSessions, "events", p.Events)
		},
	})
	if err != nil {
		return fmt.Errorf("import %s: %w", from, err)
	}
	if asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	verb := "imported"
	if dryRun {
		verb = "would import"
	}
	c := rep.Imported
	fmt.Fprintf(stdout, "BAE database %s (schema version %d)\n", from, rep.SchemaVersion)
	fmt.Fprintf(stdout, "%-13s %12s\n", "", verb)
	for _, row := range []struct {
		name string
		n    int
	}{
		{"profiles", c.Profiles},
		{"client keys", c.ClientKeys},
		{"sessions", c.Sessions},
		{"session keys", c.SessionKeys},
		{"events", c.Events},
	} {
		fmt.Fprintf(stdout, "%-13s %12d\n", row.name, row.n)
	}
	for _, p := range rep.KeysByProfile {
		state := ""
		if p.Deleted {
			state = " (deleted)"
		}
		fmt.Fprintf(stdout, "profile %s %q%s: %d client key(s)\n", p.ProfileID, p.ProfileName, state, len(p.Keys))
		for _, k := range p.Keys {
			revoked := ""
			if k.Revoked {
				revoked = " (revoked)"
			}
			fmt.Fprintf(stdout, "  %s  %s…  %q%s\n", k.ID, k.Prefix, k.Name, revoked)
		}
	}
	if c.OpenSessions > 0 {
		fmt.Fprintf(stdout, "%d session(s) open in BAE %s closed, each with a session.close (reason \"imported\") event\n", c.OpenSessions, map[bool]string{true: "would arrive", false: "arrived"}[dryRun])
	}
	if rep.AdminKeys > 0 {
		fmt.Fprintf(stdout, "%d admin key(s) not imported: this server keeps its own admin key\n", rep.AdminKeys)
	}
	return nil
}
