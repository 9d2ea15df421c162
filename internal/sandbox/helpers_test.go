package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// labelTest scopes the containers of one test run, so that tests never touch
// containers other people's builds keep on the same engine.
const labelTest = "bae.test"

func randomHex(t testing.TB) string {
	t.Helper()
	var b [8]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// requireEngine skips t when no Docker engine answers.
func requireEngine(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := EngineAvailable(ctx); err != nil {
		t.Skipf("docker engine not reachable: %v", err)
	}
}

// engineFixture is a driver plus a freshly built busybox image. When the
// test ends the image goes, with every container started from it whatever
// stopped or did not stop it (RemoveTestImage).
type engineFixture struct {
	driver *DockerDriver
	image  string
	run    string
}

func newEngineFixture(t *testing.T, opts ...DockerOption) *engineFixture {
	t.Helper()
	requireEngine(t)
	run := randomHex(t)
	f := &engineFixture{image: "bae-sandbox-test:" + run, run: run}
	ctx := testCtx(t)
	// Registered before building so a half-imported image is removed too.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := RemoveTestImage(ctx, f.image); err != nil {
			t.Errorf("remove test image: %v", err)
		}
	})
	require.NoError(t, BuildBusyboxImage(ctx, f.image, t.Name()))
	d, err := NewDockerDriver(discardLogger(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	f.driver = d
	return f
}

// labels returns the labels the server would set, plus the run's scope label.
func (f *engineFixture) labels(sessionID string) map[string]string {
	return map[string]string{LabelSession: sessionID, LabelManaged: "true", labelTest: f.run}
}

// start starts a sandbox for sessionID and stops it when the test ends.
func (f *engineFixture) start(t *testing.T, sessionID string) Handle {
	t.Helper()
	return f.startWith(t, sessionID, Policy{})
}

// startWith starts a sandbox bounded by policy and stops it when the test
// ends.
func (f *engineFixture) startWith(t *testing.T, sessionID string, policy Policy) Handle {
	t.Helper()
	h, err := f.driver.Start(testCtx(t), f.image, f.labels(sessionID), policy)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := f.driver.Stop(ctx, h.ID); err != nil {
			t.Errorf("stop sandbox %s: %v", h.ID, err)
		}
	})
	return h
}

// fakeDriver is an in-memory Driver. EnsureImage fails for images in fail
// and, for images in gate, blocks until the gate channel is closed.
type fakeDriver struct {
	mu         sync.Mutex
	fail       map[string]error
	gate       map[string]chan struct{}
	entered    chan string // when set, receives each image EnsureImage starts on
	ensured    []string
	containers map[string]Container
	stopped    []string
	stopErr    map[string]error
	nextID     int
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{
		fail:       map[string]error{},
		gate:       map[string]chan struct{}{},
		containers: map[string]Container{},
		stopErr:    map[string]error{},
	}
}

func (f *fakeDriver) EnsureImage(ctx context.Context, image string) error {
	f.mu.Lock()
	gate, entered := f.gate[image], f.entered
	f.mu.Unlock()
	if entered != nil {
		entered <- image
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = append(f.ensured, image)
	return f.fail[image]
}

func (f *fakeDriver) Start(_ context.Context, image string, labels map[string]string, _ Policy) (Handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := fmt.Sprintf("c%d", f.nextID)
	f.containers[id] = Container{ID: id, Image: image, Labels: labels}
	return Handle{ID: id, Image: image}, nil
}

func (f *fakeDriver) Exec(context.Context, string, string, io.Reader) (ExecResult, error) {
	return ExecResult{}, nil
}

func (f *fakeDriver) ExecOnce(context.Context, string, ExecRequest) (ExecResult, error) {
	return ExecResult{}, nil
}

func (f *fakeDriver) CancelExec(context.Context, string, string) error  { return nil }
func (f *fakeDriver) ReleaseExec(context.Context, string, string) error { return nil }

func (f *fakeDriver) Stop(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stopErr[id]; err != nil {
		return err
	}
	delete(f.containers, id)
	f.stopped = append(f.stopped, id)
	return nil
}

func (f *fakeDriver) List(_ context.Context, labelKey string) ([]Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key, value, withValue := strings.Cut(labelKey, "=")
	if key == "" {
		return nil, fmt.Errorf("fake driver: empty filter %q", labelKey)
	}
	var out []Container
	for _, c := range f.containers {
		if v, ok := c.Labels[key]; ok && (!withValue || v == value) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Container) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
