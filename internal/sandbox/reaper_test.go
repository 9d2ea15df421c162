package sandbox

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReapFake(t *testing.T) {
	fd := newFakeDriver()
	ctx := testCtx(t)
	start := func(labels map[string]string) string {
		h, err := fd.Start(ctx, "img", labels, Policy{})
		require.NoError(t, err)
		return h.ID
	}
	managed := func(sid string) map[string]string {
		return map[string]string{LabelManaged: "true", LabelSession: sid}
	}
	closed1 := start(managed("ses_closed"))
	closed2 := start(managed("ses_closed"))
	open := start(managed("ses_open"))
	broken := start(managed("ses_broken"))
	orphan := start(map[string]string{LabelManaged: "true"})
	foreign := start(map[string]string{LabelSession: "ses_closed"}) // not managed
	failing := start(managed("ses_gone"))
	fd.stopErr[failing] = errors.New("engine says no")

	asked := map[string]int{}
	removed, err := Reap(ctx, fd, "", func(_ context.Context, sid string) (bool, error) {
		asked[sid]++
		switch sid {
		case "ses_open":
			return true, nil
		case "ses_broken":
			return false, errors.New("db down")
		}
		return false, nil
	})
	assert.Equal(t, 3, removed)
	require.Error(t, err)
	assert.ErrorContains(t, err, "db down")
	assert.ErrorContains(t, err, "engine says no")
	assert.ElementsMatch(t, []string{closed1, closed2, orphan}, fd.stopped)
	assert.Contains(t, fd.containers, open)
	assert.Contains(t, fd.containers, broken, "kept when the session state is unknown")
	assert.Contains(t, fd.containers, foreign, "unmanaged containers are never touched")
	assert.Equal(t, 1, asked["ses_closed"], "one query per session")
}

func TestReapListFailure(t *testing.T) {
	fd := newFakeDriver()
	_, err := Reap(testCtx(t), failingList{fd}, "", func(context.Context, string) (bool, error) { return true, nil })
	assert.ErrorContains(t, err, "reap sandboxes: list broke")
}

type failingList struct{ Driver }

func (failingList) List(context.Context, string) ([]Container, error) {
	return nil, errors.New("list broke")
}

func TestReapWithEngine(t *testing.T) {
	f := newEngineFixture(t)
	closedSID, openSID := "ses_closed_"+f.run, "ses_open_"+f.run
	closed := f.start(t, closedSID)
	open := f.start(t, openSID)

	// Scoped to this run's containers; sessions are open unless they are
	// this run's closed one.
	removed, err := Reap(testCtx(t), scopedDriver{Driver: f.driver, run: f.run}, "",
		func(_ context.Context, sid string) (bool, error) { return sid != closedSID, nil })
	require.NoError(t, err)
	assert.Equal(t, 1, removed)

	left, err := f.driver.List(testCtx(t), labelTest+"="+f.run)
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.Equal(t, open.ID, left[0].ID)

	_, err = f.driver.Exec(testCtx(t), closed.ID, "true", nil)
	assert.Error(t, err, "the closed session's sandbox is gone")
	res, err := f.driver.Exec(testCtx(t), open.ID, "echo alive", nil)
	require.NoError(t, err)
	assert.Equal(t, "alive\n", res.Stdout)
}
