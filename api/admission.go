package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/bae-go/bae-go/store"
)

// DefaultAdmissionWait is how long a session open or join waits for a slot
// before it is refused with 503 server_busy.
const DefaultAdmissionWait = 30 * time.Second

// DefaultConcurrentOpens is the bound on session opens and joins running at
// once when BAE_MAX_CONCURRENT_OPENS is unset: half the CPUs the process
// may use, at least one. The other half stays with the turns of the
// sessions already open, whatever the burst of opens.
func DefaultConcurrentOpens() int {
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// admission bounds how many session opens and joins do their database work
// at once. Opens arrive in bursts (a fleet of harnesses starting); unbounded,
// each one's queries compete for the same CPUs as every open session's turns,
// and a burst of thousands stalls those turns for seconds. Waiting here costs
// a goroutine and no CPU.
type admission struct {
	slots   chan struct{}
	maxWait time.Duration
	log     *slog.Logger
}

func newAdmission(n int, maxWait time.Duration, log *slog.Logger) *admission {
	if n <= 0 {
		n = DefaultConcurrentOpens()
	}
	if maxWait <= 0 {
		maxWait = DefaultAdmissionWait
	}
	return &admission{slots: make(chan struct{}, n), maxWait: maxWait, log: log}
}

// acquire waits for a slot, up to maxWait or until ctx ends; ok is false
// when none came. waited says the caller had to wait: what it checked
// before (its key, the session's state) may have changed meanwhile and is
// checked again.
func (a *admission) acquire(ctx context.Context) (release func(), waited, ok bool) {
	select {
	case a.slots <- struct{}{}:
		return a.release, false, true
	default:
	}
	a.log.Debug("waiting for a session-open slot", "slots", cap(a.slots))
	ctx, cancel := context.WithTimeout(ctx, a.maxWait)
	defer cancel()
	select {
	case a.slots <- struct{}{}:
		return a.release, true, true
	case <-ctx.Done():
		return nil, true, false
	}
}

// admissionRetry is the Retry-After given with server_busy.
const admissionRetry = time.Second

// busyDetail says why an open, join or registration was refused.
var busyDetail = fmt.Sprintf("too many sessions are being opened at once; retry in %d s", int(admissionRetry/time.Second))

// enter is acquire for a REST handler: a refusal is 503 server_busy with
// Retry-After set on w.
func (a *admission) enter(w http.ResponseWriter, r *http.Request) (release func(), waited bool, p *Problem) {
	release, waited, ok := a.acquire(r.Context())
	if ok {
		return release, waited, nil
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(admissionRetry/time.Second)))
	return nil, waited, problem(http.StatusServiceUnavailable, "server_busy", busyDetail)
}

func (a *admission) release() { <-a.slots }

// admitOpen takes a slot for an open or join authenticated with key. After
// a wait it authenticates again, since the key may have been revoked
// meanwhile, and returns the key as read then.
func (c *clientAPI) admitOpen(w http.ResponseWriter, r *http.Request, key store.Key) (func(), store.Key, *Problem) {
	release, waited, p := c.opens.enter(w, r)
	if p != nil || !waited {
		return release, key, p
	}
	fresh, p := c.authClient(r)
	if p != nil {
		release()
		return nil, key, p
	}
	return release, fresh, nil
}
