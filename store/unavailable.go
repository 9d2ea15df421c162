package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err means the database could not be reached
// or dropped the connection (stopped, restarting, network cut), as opposed
// to rejecting the statement. Every store write is idempotent, so a caller
// may repeat the whole operation once the database answers again.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, crash, not yet accepting
			return true
		case pgErr.Code == "53300": // too many connections (a restart's reconnect storm)
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	}
	// pgx reports a connection it already found broken by message only.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection reset")
}

// WaitOut runs fn, repeating it while the database is unavailable, with
// pauses from 100 ms doubling up to maxWait, until fn succeeds or fails
// otherwise, ctx ends, or the next pause would pass deadline (zero: no
// deadline). onWait, when set, runs before each pause. It returns fn's last
// error. Every store write is idempotent, so repeating fn is safe.
func WaitOut(ctx context.Context, deadline time.Time, maxWait time.Duration, onWait func(error), fn func(context.Context) error) error {
	wait := 100 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil || !Unavailable(err) {
			return err
		}
		if !deadline.IsZero() && time.Now().Add(wait).After(deadline) {
			return err
		}
		if onWait != nil {
			onWait(err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		if wait < maxWait {
			wait = min(2*wait, maxWait)
		}
	}
}
