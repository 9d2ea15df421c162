// Command two-drivers shows a multiplayer session: driver A opens it,
// driver B (another client key on the same profile) joins, an observer
// watches, and both drivers send at once. The server runs their turns one
// after the other (FIFO), and every event is attributed to its driver.
//
//	BAE_CLIENT_KEY=bae_…A BAE_CLIENT_KEY_B=bae_…B go run ./examples/two-drivers
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/bae-go/bae-go/sdk"
)

func main() {
	msgA := flag.String("a", "Say hello from A.", "driver A's message")
	msgB := flag.String("b", "Say hello from B.", "driver B's message")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *msgA, *msgB); err != nil {
		fmt.Fprintln(os.Stderr, "two-drivers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, msgA, msgB string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfgA := sdk.ConfigFromEnv()
	cfgA.Logger, cfgA.ClientVersion = log, "two-drivers/A"
	cfgB := cfgA
	cfgB.ClientKey, cfgB.ClientVersion = strings.TrimSpace(os.Getenv("BAE_CLIENT_KEY_B")), "two-drivers/B"
	if cfgA.ClientKey == "" || cfgB.ClientKey == "" {
		return errors.New("set BAE_CLIENT_KEY and BAE_CLIENT_KEY_B to two client keys of the same profile")
	}

	a, err := sdk.Connect(ctx, cfgA)
	if err != nil {
		return fmt.Errorf("driver A connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := a.Close(cctx); err != nil {
			log.Warn("close", "err", err)
		}
	}()
	b, err := sdk.Join(ctx, cfgB, a.ID)
	if err != nil {
		return fmt.Errorf("driver B join: %w", err)
	}
	drivers, err := a.Participants(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("session %s, drivers %v\n", a.ID, drivers)

	// Who is who: session.open is A's, session.join is B's.
	who := map[string]string{}
	var lastID string
	for e, err := range a.Events(ctx, sdk.EventsQuery{}) {
		if err != nil {
			return err
		}
		switch e.Type {
		case sdk.EventSessionOpen:
			who[e.ClientKeyID] = "A"
		case sdk.EventSessionJoin:
			who[e.ClientKeyID] = "B"
		}
		lastID = e.ID
	}

	// The observer resumes after the last persisted event, so it cannot
	// miss anything however long the subscription takes to open.
	observer, err := sdk.Attach(cfgA, a.ID, a.Key())
	if err != nil {
		return err
	}
	obsCtx, stopObserver := context.WithCancel(ctx)
	defer stopObserver()
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for e, err := range observer.Subscribe(obsCtx, sdk.SubscribeOptions{SinceEventID: lastID}) {
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					log.Warn("observer", "err", err)
				}
				return
			}
			fmt.Printf("  [observer] %-2s %s\n", who[e.ClientKeyID], sdk.Describe(e))
		}
	}()

	var wg sync.WaitGroup
	for _, d := range []struct {
		name string
		s    *sdk.Session
		msg  string
	}{{"A", a, msgA}, {"B", b, msgB}} {
		wg.Go(func() {
			start := time.Now()
			reply, err := d.s.Send(ctx, d.msg)
			if err != nil {
				fmt.Printf("%s: error: %v\n", d.name, err)
				return
			}
			fmt.Printf("%s (after %s): %s\n", d.name, time.Since(start).Round(time.Millisecond), reply.Text())
		})
	}
	wg.Wait()

	if err := a.Unsubscribe(ctx); err != nil {
		log.Warn("unsubscribe", "err", err)
	}
	<-observed

	fmt.Println("turn order in the durable log:")
	for e, err := range a.Events(ctx, sdk.EventsQuery{}) {
		if err != nil {
			return err
		}
		if e.Type == sdk.EventClientMessageSend || e.Type == sdk.EventServerMessageSend {
			fmt.Printf("  %s %s\n", who[e.ClientKeyID], e.Type)
		}
	}
	return nil
}
