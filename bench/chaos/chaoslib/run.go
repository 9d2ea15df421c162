package chaoslib

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/lib/adminkey"
	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/sdk"
)

// budgetTokens is the lifetime token budget of every seventh session:
// a few turns' worth, so refusals and resets happen during the run.
const budgetTokens = 3000

// run is one campaign in progress.
type run struct {
	o         Options
	id        string
	topo      *topology
	fake      *fakeprovider.Server
	pf        *providerFaults
	mcp       *httpMCP
	stdioFile string
	image     string
	tc        client.Client
	admin     benchstack.Admin
	// keys are the client keys: one per driver index, then one per
	// observer index (a participant's declarations are its key's, so two
	// participants of a session never share one).
	keys       []string
	sessions   []*chaosSession
	faultOrder []string

	rmu sync.Mutex
	rng *rand.Rand

	turns, interrupts, refusedBusy, refusedQuota, budgetResets atomic.Int64
	samples                                                    *sampler

	// calm is when the last process fault ended (unix ns), or 0 while one
	// is on: a client gives up on a message only after a calm spell.
	calm atomic.Int64
}

// calmFor is how long no process fault has been on (0 during one).
func (r *run) calmFor() time.Duration {
	at := r.calm.Load()
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}

func (r *run) rand(n int) int {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return r.rng.IntN(n)
}

// Run performs one campaign. The error is for a campaign that could not
// be carried out; what it found is in the report (Report.OK).
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	r := &run{o: o, id: ids.New("")[:6], pf: &providerFaults{}, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x51ed))}
	fr := rand.New(rand.NewPCG(o.Seed^0xfa17, o.Seed))
	r.faultOrder = append([]string(nil), FaultKinds...)
	fr.Shuffle(len(r.faultOrder), func(i, j int) { r.faultOrder[i], r.faultOrder[j] = r.faultOrder[j], r.faultOrder[i] })
	o.Log.Info("chaos campaign", "seed", o.Seed, "duration", o.Duration, "sessions", o.Sessions, "replicas", o.Replicas)

	if o.Sandboxes > 0 {
		if err := sandbox.EngineAvailable(ctx); err != nil {
			return nil, fmt.Errorf("sandbox execs need a Docker engine (or -sandboxes -1): %w", err)
		}
		r.image = "bae-chaos:" + ids.New("")[:12]
		if err := sandbox.BuildBusyboxImage(ctx, r.image, "bench/chaos"); err != nil {
			return nil, err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := sandbox.RemoveTestImage(cctx, r.image); err != nil {
				o.Log.Warn("remove sandbox image", "err", err)
			}
		}()
	}
	if r.mcp, err = startHTTPMCP(); err != nil {
		return nil, err
	}
	defer r.mcp.close()
	stdioDir, err := os.MkdirTemp("", "bae-chaos-stdio-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stdioDir)
	r.stdioFile = filepath.Join(stdioDir, "calls")
	stdio, err := stdioTOML(r.stdioFile)
	if err != nil {
		return nil, err
	}
	r.fake = fakeprovider.Start()
	defer r.fake.Close()
	// The primary misbehaves when a provider fault is armed; the fallback
	// (another lane of the same fake) never does, so a session survives a
	// failing primary as it would in production.
	lane := r.fake.Lane("chaos")
	lane.ContextWindow(fakeWindow)
	lane.Respond(respond(r.pf, sandboxCommand))
	fb := r.fake.Lane("chaos-fallback")
	fb.ContextWindow(fakeWindow)
	fb.Respond(respond(&providerFaults{}, sandboxCommand))
	entry := `
[[providers.entries]]
name = %q
provider = "anthropic"
base_url = %q
model = "fake-model"
auth_token = "not-a-secret"
context_window = %d
max_tokens = 1000
`
	cfg := fmt.Sprintf(entry, "fake", lane.URL(), windowTokens) + fmt.Sprintf(entry, "fallback", fb.URL(), windowTokens) + r.mcp.toml() + stdio

	rep := &Report{Options: o, RunID: r.id}
	if r.topo, err = startTopology(ctx, o, cfg); err != nil {
		return nil, err
	}
	defer func() { r.topo.close(o.Keep || !rep.OK()) }()
	rep.WorkDir, rep.Database = r.topo.workDir, r.topo.dbName()
	key, err := adminkey.ReadKeyFile(filepath.Join(r.topo.workDir, "data", "admin-key.pem"))
	if err != nil {
		return nil, err
	}
	tlog := slog.New(slog.DiscardHandler)
	if r.tc, err = client.DialContext(ctx, client.Options{HostPort: r.topo.temporalAddr, Namespace: "default", Logger: sdklog.NewStructuredLogger(tlog)}); err != nil {
		return nil, err
	}
	defer r.tc.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = benchstack.SearchAttributesReady(sctx, r.tc, "default")
	cancel()
	if err != nil {
		return nil, err
	}
	r.admin = benchstack.Admin{HTTP: &http.Client{Transport: newBalancer(r.topo, true), Timeout: 30 * time.Second}, URL: "http://lb", Key: key}
	profile := map[string]any{"name": "chaos", "primary_provider": "fake", "fallback_providers": []string{"fallback"}, "allowed_tools": []string{clientTool},
		"mcp_servers": []string{mcpHTTPName, mcpStdioName}}
	if r.image != "" {
		profile["available_sandboxes"] = []string{r.image}
	}
	if err := r.createKeys(ctx, profile); err != nil {
		return nil, err
	}
	if err := r.openSessions(ctx); err != nil {
		return nil, err
	}
	rep.Setup = time.Since(t0)
	o.Log.Info("sessions open", "sessions", len(r.sessions), "setup", rep.Setup.Round(time.Second))

	// The campaign: drivers, observers, faults and the sampler until the
	// duration is up.
	r.samples = &sampler{topo: r.topo}
	stop := make(chan struct{})
	var wg, owg sync.WaitGroup
	sampDone := make(chan struct{})
	go func() { defer close(sampDone); r.samples.loop(stop) }()
	r.calm.Store(time.Now().UnixNano())
	f := &faulter{run: r, r: fr}
	fdone := make(chan struct{})
	go func() { defer close(fdone); f.loop(ctx, stop) }()
	for _, s := range r.sessions {
		for _, d := range s.drivers {
			wg.Add(1)
			go func() { defer wg.Done(); d.loop(stop) }()
		}
		for _, ob := range s.observers {
			owg.Add(1)
			go func() { defer owg.Done(); ob.loop(stop) }()
		}
	}
	driveStart := time.Now()
	select {
	case <-time.After(o.Duration):
	case <-ctx.Done():
	}
	close(stop)
	<-fdone
	r.fake.Release()
	if err := r.topo.awaitAllUp(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	wg.Wait()
	rep.Drive = time.Since(driveStart)
	o.Log.Info("drivers done; settling", "drive", rep.Drive.Round(time.Second))
	owg.Wait()
	<-sampDone
	if ctx.Err() != nil {
		return nil, fmt.Errorf("campaign interrupted: %w", ctx.Err())
	}
	r.settle(ctx)
	boxes := r.readSandboxes(ctx)
	closed := r.closeSome(ctx)
	// Anything written after a close shows in the log by now.
	time.Sleep(3 * time.Second)
	rep.Faults = f.snapshot()
	rep.ProviderFaults = r.pf.injected
	rep.Turns = r.turns.Load()
	rep.Interrupts, rep.RefusedBusy, rep.RefusedQuota, rep.BudgetResets = r.interrupts.Load(), r.refusedBusy.Load(), r.refusedQuota.Load(), r.budgetResets.Load()
	in, err := r.collect(ctx, closed, boxes, rep.Drive)
	if err != nil {
		return nil, fmt.Errorf("collect: %w", err)
	}
	in.Faults = rep.Faults
	rep.Input = in
	for _, rp := range r.topo.replicas {
		rp.mu.Lock()
		rep.Unexpected = append(rep.Unexpected, rp.unexpected...)
		rp.mu.Unlock()
	}
	for _, s := range r.sessions {
		for _, ob := range s.observers {
			ob.mu.Lock()
			rep.Resumes += ob.resumes
			rep.Resets += ob.resets
			if rep.StreamEnds == nil {
				rep.StreamEnds = map[string]int{}
			}
			for k, v := range ob.ends {
				rep.StreamEnds[k] += v
			}
			ob.mu.Unlock()
		}
	}
	rep.Violations = Check(in, o.Break)
	rep.Wall = time.Since(t0)
	return rep, nil
}

// openSessions opens every session: its first driver opens it, the
// others join and register, the observers join without registering.
func (r *run) openSessions(ctx context.Context) error {
	hc := &http.Client{Transport: newBalancer(r.topo, false)}
	for n := range r.o.Sessions {
		s := &chaosSession{n: n, budget: n%7 == 3}
		withSandbox := n < r.o.Sandboxes && r.image != ""
		for j := range r.o.Drivers {
			d := &driver{n: j, s: s, run: r, r: rand.New(rand.NewPCG(r.o.Seed+uint64(n*100+j), uint64(n)))}
			opts := []sdk.Option{
				sdk.WithTool(sdk.Tool{Name: clientTool, Description: "Answers a probe; run by the client.",
					InputSchema: map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "string"}}},
					Handler:     func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("unused") }}),
				sdk.WithHooks(sdk.Hooks{OnDelta: d.onDelta}),
			}
			if withSandbox {
				opts = append(opts, sdk.WithSandboxTool(sdk.ToolSpec{Name: sandboxTool, Description: "Runs a shell command in the session's sandbox.",
					InputSchema: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}, "required": []string{"command"}}}))
			}
			cfg := sdk.Config{ServerURL: "http://lb", ClientKey: r.keys[j], HTTPClient: hc, ClientVersion: "bae-chaos", SendRetries: 8,
				Logger: slog.New(slog.DiscardHandler)}
			var err error
			if j == 0 {
				d.sess, err = retry(ctx, func() (*sdk.Session, error) { return sdk.Connect(ctx, cfg, opts...) })
				if err == nil {
					s.id = d.sess.ID
				}
			} else {
				d.sess, err = retry(ctx, func() (*sdk.Session, error) { return sdk.Join(ctx, cfg, s.id, opts...) })
			}
			if err != nil {
				return fmt.Errorf("session %d driver %d: %w", n, j, err)
			}
			s.drivers = append(s.drivers, d)
		}
		for j := range r.o.Observers {
			var resp struct {
				SessionKey string `json:"session_key"`
			}
			if err := joinRaw(ctx, hc, r.keys[r.o.Drivers+j], s.id, &resp); err != nil {
				return fmt.Errorf("session %d observer %d: %w", n, j, err)
			}
			s.observers = append(s.observers, &observer{n: j, s: s, key: resp.SessionKey, run: r, hc: hc})
		}
		if withSandbox {
			box, err := retry(ctx, func() (sdk.RemoteSandbox, error) { return s.drivers[0].sess.StartRemoteSandbox(ctx, r.image) })
			if err != nil {
				return fmt.Errorf("session %d sandbox: %w", n, err)
			}
			s.sandbox = box.SandboxID
		}
		if s.budget {
			if err := r.admin.Do(ctx, http.MethodPut, "/admin/v1/budgets/session/"+s.id,
				map[string]any{"unit": "tokens", "limit": budgetTokens, "period": "none"}, nil, http.StatusOK); err != nil {
				return fmt.Errorf("session %d budget: %w", n, err)
			}
		}
		r.sessions = append(r.sessions, s)
	}
	return nil
}

// createKeys creates the profile and a client key per participant index.
func (r *run) createKeys(ctx context.Context, profile map[string]any) error {
	var prof struct {
		ID string `json:"id"`
	}
	if err := r.admin.Do(ctx, http.MethodPost, "/admin/v1/profiles", profile, &prof, http.StatusCreated); err != nil {
		return fmt.Errorf("create profile: %w", err)
	}
	for i := range r.o.Drivers + r.o.Observers {
		var key struct {
			Key string `json:"key"`
		}
		if err := r.admin.Do(ctx, http.MethodPost, "/admin/v1/keys", map[string]any{"name": fmt.Sprintf("chaos-%d", i), "profile_id": prof.ID}, &key, http.StatusCreated); err != nil {
			return fmt.Errorf("create client key: %w", err)
		}
		r.keys = append(r.keys, key.Key)
	}
	return nil
}

// resetBudget starts a spent session budget afresh, as an operator would.
func (r *run) resetBudget(ctx context.Context, s *chaosSession) {
	for range 20 {
		if r.admin.Do(ctx, http.MethodPost, "/admin/v1/budgets/session/"+s.id+"/reset", nil, nil, http.StatusOK) == nil {
			r.budgetResets.Add(1)
			return
		}
		time.Sleep(time.Second)
	}
}

func joinRaw(ctx context.Context, hc *http.Client, clientKey, sessionID string, out any) error {
	_, err := retry(ctx, func() (struct{}, error) {
		b := benchstack.Admin{HTTP: hc, URL: "http://lb", Key: clientKey}
		return struct{}{}, b.Do(ctx, http.MethodPost, "/api/v1/sessions/"+sessionID+"/join", map[string]any{"client_version": "bae-chaos-observer"}, out, http.StatusCreated)
	})
	return err
}

// retry retries a setup call for a while (a replica may be starting).
func retry[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	var last error
	for range 60 {
		v, err := fn()
		if err == nil {
			return v, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	var zero T
	return zero, last
}

// settle waits (up to 3 minutes) until every session's workflow is idle:
// a turn still retrying after the last fault finishes first.
func (r *run) settle(ctx context.Context) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		busy := 0
		for _, s := range r.sessions {
			if cv, err := r.control(ctx, s.id); err != nil || cv.Busy || cv.Queued > 0 || cv.Paused != nil {
				busy++
			}
		}
		if busy == 0 {
			return
		}
		r.o.Log.Info("settling", "busy_sessions", busy)
		time.Sleep(2 * time.Second)
	}
}

// closeSome closes every other session through its first driver, so the
// check sees closed sessions (nothing may follow their session.close)
// beside idle ones.
func (r *run) closeSome(ctx context.Context) map[string]bool {
	closed := map[string]bool{}
	for _, s := range r.sessions {
		if s.n%2 == 1 {
			continue
		}
		if _, err := retry(ctx, func() (struct{}, error) { return struct{}{}, s.drivers[0].sess.Close(ctx) }); err != nil {
			r.o.Log.Warn("close session", "session", s.n, "err", err)
			continue
		}
		closed[s.id] = true
	}
	return closed
}
