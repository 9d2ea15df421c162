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
	const dep = "dep_mine"
	managed := func(sid string) map[string]string {
		return map[string]string{LabelManaged: "true", LabelSession: sid, LabelDeployment: dep}
	}
	closed1 := start(managed("ses_closed"))
	closed2 := start(managed("ses_closed"))
	gone := start(managed("ses_gone"))
	open := start(managed("ses_open"))
	broken := start(managed("ses_broken"))
	orphan := start(map[string]string{LabelManaged: "true", LabelDeployment: dep})
	unmanaged := start(map[string]string{LabelSession: "ses_closed", LabelDeployment: dep})
	other := start(map[string]string{LabelManaged: "true", LabelSession: "ses_closed", LabelDeployment: "dep_other"})
	otherOrphan := start(map[string]string{LabelManaged: "true", LabelDeployment: "dep_other"})
	legacy := start(map[string]string{LabelManaged: "true", LabelSession: "ses_closed"}) // no deployment label
	failing := start(managed("ses_failing"))
	fd.stopErr[failing] = errors.New("engine says no")

	asked := map[string]int{}
	reaped, err := Reap(ctx, fd, dep, func(_ context.Context, sid string) (SessionState, error) {
		asked[sid]++
		switch sid {
		case "ses_open":
			return SessionOpen, nil
		case "ses_broken":
			return SessionOpen, errors.New("db down")
		case "ses_gone":
			return SessionUnknown, nil
		}
		return SessionEnded, nil
	})
	require.Error(t, err)
	assert.ErrorContains(t, err, "db down")
	assert.ErrorContains(t, err, "engine says no")
	got := map[string]ReapReason{}
	for _, r := range reaped {
		got[r.ID] = r.Reason
	}
	assert.Equal(t, map[string]ReapReason{
		closed1: ReapSessionEnded, closed2: ReapSessionEnded,
		gone: ReapSessionUnknown, orphan: ReapNoSession,
	}, got)
	assert.ElementsMatch(t, []string{closed1, closed2, gone, orphan}, fd.stopped)
	for id, why := range map[string]string{
		open:        "its session is open",
		broken:      "kept when the session state is unknown",
		unmanaged:   "unmanaged containers are never touched",
		other:       "another deployment's containers are left alone",
		otherOrphan: "another deployment's containers are left alone, even without a session",
		legacy:      "a container without a deployment label belongs to no known deployment",
		failing:     "its stop failed",
	} {
		assert.Contains(t, fd.containers, id, why)
	}
	assert.Equal(t, 1, asked["ses_closed"], "one query per session")
	assert.NotContains(t, asked, "", "no query for a container without a session")
}

func TestReapRefusesAnEmptyDeployment(t *testing.T) {
	fd := newFakeDriver()
	_, err := fd.Start(testCtx(t), "img", map[string]string{LabelManaged: "true"}, Policy{})
	require.NoError(t, err)
	_, err = Reap(testCtx(t), fd, "", func(context.Context, string) (SessionState, error) { return SessionEnded, nil })
	assert.ErrorContains(t, err, "no deployment id")
	assert.Empty(t, fd.stopped)
}

func TestReapListFailure(t *testing.T) {
	fd := newFakeDriver()
	_, err := Reap(testCtx(t), failingList{fd}, "dep", func(context.Context, string) (SessionState, error) { return SessionOpen, nil })
	assert.ErrorContains(t, err, "reap sandboxes: list broke")
}

type failingList struct{ Driver }

func (failingList) List(context.Context, string) ([]Container, error) {
	return nil, errors.New("list broke")
}

func TestReapWithEngine(t *testing.T) {
	f := newEngineFixture(t)
	dep := "dep_" + f.run
	closedSID, openSID := "ses_closed_"+f.run, "ses_open_"+f.run
	start := func(sid, deployment string) Handle {
		labels := f.labels(sid)
		labels[LabelDeployment] = deployment
		h, err := f.driver.Start(testCtx(t), f.image, labels, Policy{})
		require.NoError(t, err)
		return h
	}
	closed := start(closedSID, dep)
	open := start(openSID, dep)
	foreign := start(closedSID, "dep_other_"+f.run)

	// Sessions are open unless they are this run's closed one.
	reaped, err := Reap(testCtx(t), f.driver, dep,
		func(_ context.Context, sid string) (SessionState, error) {
			if sid == closedSID {
				return SessionEnded, nil
			}
			return SessionOpen, nil
		})
	require.NoError(t, err)
	require.Len(t, reaped, 1)
	assert.Equal(t, closed.ID, reaped[0].ID)
	assert.Equal(t, ReapSessionEnded, reaped[0].Reason)

	left, err := f.driver.List(testCtx(t), labelTest+"="+f.run)
	require.NoError(t, err)
	var ids []string
	for _, c := range left {
		ids = append(ids, c.ID)
	}
	assert.ElementsMatch(t, []string{open.ID, foreign.ID}, ids, "the open session's and the other deployment's containers stay")

	_, err = f.driver.Exec(testCtx(t), closed.ID, "true", nil)
	assert.Error(t, err, "the closed session's sandbox is gone")
	res, err := f.driver.Exec(testCtx(t), open.ID, "echo alive", nil)
	require.NoError(t, err)
	assert.Equal(t, "alive\n", res.Stdout)
}
