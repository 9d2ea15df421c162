// Command fork measures what forking a long session costs beside opening
// an empty one: the time of each (p50, p90) and the rows and bytes a fork
// writes, for a source of -events events.
//
//	go run ./bench/fork [-events 10000] [-n 50]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/store"
)

func main() {
	nEvents := flag.Int("events", 10000, "events in the source session (four per turn)")
	n := flag.Int("n", 50, "forks and opens timed")
	base := flag.String("db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server to create a scratch database on")
	flag.Parse()
	if err := run(*base, *nEvents, *n); err != nil {
		fmt.Fprintln(os.Stderr, "fork:", err)
		os.Exit(1)
	}
}

func run(base string, nEvents, n int) error {
	ctx := context.Background()
	db, err := benchstack.CreateDatabase(ctx, base, "bae_bench_fork_", nil)
	if err != nil {
		return err
	}
	defer db.Drop() //nolint:errcheck
	st, err := store.Open(ctx, db.URL, store.Options{MaxConns: 4, KeyHasher: keyhash.SHA256{}})
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "bench", PrimaryProvider: "x"})
	if err != nil {
		return err
	}
	k, _, err := st.NewClientKey(ctx, "bench", p.ID)
	if err != nil {
		return err
	}
	decl := store.ClientDecl{ClientKeyID: k.ID}
	src, _, err := st.CreateSession(ctx, p.ID, decl, events.Declarations{}, store.Caps{})
	if err != nil {
		return err
	}
	// Finished turns of four events and two messages each.
	for t := 0; t*4 < nEvents-1; t++ {
		turn := fmt.Sprintf("trn_%08d", t)
		err := st.Tx(ctx, func(tx *store.Tx) error {
			tx.AppendMessage(src.ID, turn+"/user", "user", json.RawMessage(fmt.Sprintf(`"message %d"`, t)))
			tx.AppendMessage(src.ID, turn+"/a", "assistant", json.RawMessage(fmt.Sprintf(`[{"type":"text","text":"answer %d"}]`, t)))
			evs := make([]store.NewEvent, 4)
			for i := range evs {
				evs[i] = store.NewEvent{TurnID: turn, IdemKey: fmt.Sprintf("%s/%d", turn, i), Payload: events.DriverRegister{}}
			}
			_, err := tx.AppendEvents(ctx, src.ID, evs...)
			return err
		})
		if err != nil {
			return err
		}
	}
	head, err := st.LastEventSeq(ctx, src.ID)
	if err != nil {
		return err
	}
	caps := store.Caps{}
	var forks, opens []time.Duration
	var last string
	for range n {
		t0 := time.Now()
		f, _, _, err := st.ForkSession(ctx, src.ID, 0, decl, events.Declarations{}, caps)
		if err != nil {
			return err
		}
		forks = append(forks, time.Since(t0))
		last = f.ID
		t0 = time.Now()
		if _, _, err := st.CreateSession(ctx, p.ID, decl, events.Declarations{}, caps); err != nil {
			return err
		}
		opens = append(opens, time.Since(t0))
	}
	rows, bytes, err := written(ctx, st, last)
	if err != nil {
		return err
	}
	conv, _, err := st.Conversation(ctx, last)
	if err != nil {
		return err
	}
	fmt.Printf("source: %d events, %d conversation bytes (the fork reads them all: %v)\n", head, len(conv), len(conv) > 2)
	fmt.Printf("%-28s %10s %10s\n", "", "p50", "p90")
	fmt.Printf("%-28s %10s %10s\n", "open an empty session", pct(opens, 50), pct(opens, 90))
	fmt.Printf("%-28s %10s %10s\n", fmt.Sprintf("fork a %d-event session", head), pct(forks, 50), pct(forks, 90))
	fmt.Printf("a fork writes %d rows, %d bytes (row data, whatever the source's length)\n", rows, bytes)
	return nil
}

// written counts the rows a session holds across the tables a fork writes,
// and their bytes.
func written(ctx context.Context, st *store.Store, id string) (rows, bytes int64, err error) {
	err = st.Pool.QueryRow(ctx, `SELECT sum(n), sum(b) FROM (
		SELECT count(*) n, coalesce(sum(pg_column_size(t.*)), 0) b FROM sessions t WHERE id = $1
		UNION ALL SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM session_clients t WHERE session_id = $1
		UNION ALL SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM keys t WHERE session_id = $1
		UNION ALL SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM session_events t WHERE session_id = $1
		UNION ALL SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM session_messages t WHERE session_id = $1
		UNION ALL SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM session_context t WHERE session_id = $1) x`, id).Scan(&rows, &bytes)
	return rows, bytes, err
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100].Round(10 * time.Microsecond)
}
