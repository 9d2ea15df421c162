package sandbox

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProvisionerPendingWithoutBlocking(t *testing.T) {
	fd := newFakeDriver()
	gate := make(chan struct{})
	fd.gate["python:3.12"] = gate
	p := NewProvisioner(fd, discardLogger())
	t.Cleanup(p.Close)

	// Returns while EnsureImage is blocked: the caller never waits for pulls.
	p.Provision("pro_a", []string{"python:3.12", "node:22"})
	assert.Equal(t, []ImageStatus{
		{Name: "python:3.12", Status: StatusPending},
		{Name: "node:22", Status: StatusPending},
	}, p.Images("pro_a", []string{"python:3.12", "node:22"}))

	close(gate)
	require.NoError(t, p.Wait(testCtx(t), "pro_a"))
	assert.Equal(t, []ImageStatus{
		{Name: "node:22", Status: StatusAvailable},
		{Name: "python:3.12", Status: StatusAvailable},
	}, p.Images("pro_a", []string{"node:22", "python:3.12"}), "order follows the requested list")
	assert.Equal(t, []string{"python:3.12", "node:22"}, fd.ensured, "images are ensured in declaration order")
}

func TestProvisionerErrorDetailAndScoping(t *testing.T) {
	fd := newFakeDriver()
	fd.fail["private/x"] = errors.New("ensure sandbox image private/x: pull failed: denied")
	p := NewProvisioner(fd, discardLogger())
	t.Cleanup(p.Close)

	p.Provision("pro_b", []string{"python:3.12", "private/x"})
	p.Provision("pro_a", []string{"node:22"})
	require.NoError(t, p.Wait(testCtx(t), "pro_a"))
	require.NoError(t, p.Wait(testCtx(t), "pro_b"))

	assert.Equal(t, []ImageStatus{
		{Name: "private/x", Status: StatusError, Detail: "ensure sandbox image private/x: pull failed: denied"},
	}, p.Images("pro_b", []string{"private/x"}))

	// pro_a never declared python:3.12: it is not available to pro_a even
	// though pro_b has it.
	assert.Equal(t, []ImageStatus{
		{Name: "node:22", Status: StatusAvailable},
		{Name: "python:3.12", Status: StatusPending},
	}, p.Images("pro_a", []string{"node:22", "python:3.12"}))
	assert.Equal(t, []ImageStatus{{Name: "node:22", Status: StatusPending}},
		p.Images("pro_unknown", []string{"node:22"}))
	assert.Empty(t, p.Images("pro_a", nil))

	assert.Equal(t, []ProfileStatus{
		{ProfileID: "pro_a", Images: []ImageStatus{{Name: "node:22", Status: StatusAvailable}}},
		{ProfileID: "pro_b", Images: []ImageStatus{
			{Name: "private/x", Status: StatusError, Detail: "ensure sandbox image private/x: pull failed: denied"},
			{Name: "python:3.12", Status: StatusAvailable},
		}},
	}, p.Status())

	raw, err := json.Marshal(p.Images("pro_b", []string{"python:3.12", "private/x"}))
	require.NoError(t, err)
	assert.JSONEq(t, `[{"name":"python:3.12","status":"available"},
		{"name":"private/x","status":"error","detail":"ensure sandbox image private/x: pull failed: denied"}]`, string(raw))
}

func TestProvisionerReplaceSupersedesOldRun(t *testing.T) {
	fd := newFakeDriver()
	gate := make(chan struct{})
	fd.gate["slow:1"] = gate
	fd.fail["slow:1"] = errors.New("stale failure")
	fd.entered = make(chan string, 8)
	p := NewProvisioner(fd, discardLogger())
	t.Cleanup(p.Close)

	p.Provision("pro_a", []string{"slow:1", "old:1"})
	require.Equal(t, "slow:1", <-fd.entered, "first run is now blocked in EnsureImage")
	p.mu.Lock()
	firstDone := p.profiles["pro_a"].done
	p.mu.Unlock()

	// The replacement drops old:1 and re-declares slow:1, which now succeeds.
	fd.mu.Lock()
	delete(fd.gate, "slow:1")
	delete(fd.fail, "slow:1")
	fd.mu.Unlock()
	p.Provision("pro_a", []string{"slow:1", "new:1"})
	require.NoError(t, p.Wait(testCtx(t), "pro_a"))

	// Release the first run: its stale failure must not overwrite the newer
	// result, and it must not go on to old:1.
	close(gate)
	<-firstDone
	assert.Equal(t, []ProfileStatus{{ProfileID: "pro_a", Images: []ImageStatus{
		{Name: "new:1", Status: StatusAvailable},
		{Name: "slow:1", Status: StatusAvailable},
	}}}, p.Status())
	assert.NotContains(t, fd.ensured, "old:1")
}

func TestProvisionerForgetAndEmpty(t *testing.T) {
	fd := newFakeDriver()
	p := NewProvisioner(fd, discardLogger())
	t.Cleanup(p.Close)

	p.Provision("pro_a", []string{"a:1", "a:1", ""})
	require.NoError(t, p.Wait(testCtx(t), "pro_a"))
	assert.Equal(t, []ProfileStatus{{ProfileID: "pro_a", Images: []ImageStatus{{Name: "a:1", Status: StatusAvailable}}}},
		p.Status(), "duplicates and blanks are dropped")

	p.Provision("pro_a", nil)
	assert.Empty(t, p.Status(), "an empty list forgets the profile")
	assert.NoError(t, p.Wait(testCtx(t), "pro_a"), "nothing to wait for")

	p.Provision("pro_b", []string{"b:1"})
	require.NoError(t, p.Wait(testCtx(t), "pro_b"))
	p.Forget("pro_b")
	assert.Empty(t, p.Status())
	assert.Equal(t, StatusPending, p.Images("pro_b", []string{"b:1"})[0].Status)
}

func TestProvisionerCloseCancelsPulls(t *testing.T) {
	fd := newFakeDriver()
	fd.gate["stuck:1"] = make(chan struct{}) // never released
	p := NewProvisioner(fd, discardLogger())
	p.Provision("pro_a", []string{"stuck:1"})
	p.Close() // returns only once the blocked EnsureImage saw the cancellation
	require.NoError(t, p.Wait(testCtx(t), "pro_a"))
	assert.Equal(t, StatusPending, p.Images("pro_a", []string{"stuck:1"})[0].Status)

	p.Provision("pro_a", []string{"later:1"})
	require.NoError(t, p.Wait(testCtx(t), "pro_a"))
	assert.Empty(t, fd.ensured, "nothing runs after Close")
}

func TestProvisionerWithEngine(t *testing.T) {
	f := newEngineFixture(t)
	missing := "127.0.0.1:1/bae-sandbox-test/missing:" + f.run
	p := NewProvisioner(f.driver, discardLogger())
	t.Cleanup(p.Close)

	p.Provision("pro_engine", []string{f.image, missing})
	require.NoError(t, p.Wait(testCtx(t), "pro_engine"))
	got := p.Images("pro_engine", []string{f.image, missing})
	require.Len(t, got, 2)
	assert.Equal(t, ImageStatus{Name: f.image, Status: StatusAvailable}, got[0])
	assert.Equal(t, missing, got[1].Name)
	assert.Equal(t, StatusError, got[1].Status)
	assert.Contains(t, got[1].Detail, "pull failed")

	assert.Equal(t, StatusPending, p.Images("pro_other", []string{f.image})[0].Status,
		"another profile never sees this profile's images")
}
