package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

func TestSearchSessionsNewestFirstWithFilters(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	mk := func(name string) (string, string) {
		p, err := st.CreateProfile(ctx, store.ProfileInput{Name: name, PrimaryProvider: "x"})
		require.NoError(t, err)
		k, _, err := st.NewClientKey(ctx, "k", p.ID)
		require.NoError(t, err)
		return p.ID, k.ID
	}
	pa, ka := mk("a")
	pb, kb := mk("b")
	var ids []string // creation order
	for i := 0; i < 5; i++ {
		pid, kid := pa, ka
		if i%2 == 1 {
			pid, kid = pb, kb
		}
		s, _, err := st.CreateSession(ctx, pid, store.ClientDecl{ClientKeyID: kid}, events.Declarations{}, store.Caps{})
		require.NoError(t, err)
		ids = append(ids, s.ID)
	}
	_, _, err := st.EndSession(ctx, ids[4], store.StateError)
	require.NoError(t, err)

	idsOf := func(p store.Page[store.Session]) []string {
		out := []string{}
		for _, s := range p.Items {
			out = append(out, s.ID)
		}
		return out
	}
	page, err := st.SearchSessions(ctx, store.SessionFilter{}, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{ids[4], ids[3]}, idsOf(page), "newest first")
	require.NotNil(t, page.NextCursor)
	var next int64
	for _, s := range page.Items {
		next = s.Seq
	}
	page, err = st.SearchSessions(ctx, store.SessionFilter{}, next, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{ids[2], ids[1]}, idsOf(page))

	page, err = st.SearchSessions(ctx, store.SessionFilter{ProfileID: pb}, 0, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{ids[3], ids[1]}, idsOf(page))
	assert.Nil(t, page.NextCursor)

	page, err = st.SearchSessions(ctx, store.SessionFilter{State: store.StateOpen, ProfileID: pa}, 0, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{ids[2], ids[0]}, idsOf(page), "the errored session is filtered out")

	page, err = st.SearchSessions(ctx, store.SessionFilter{IDPrefix: ids[2][:len(ids[2])-1]}, 0, 10)
	require.NoError(t, err)
	assert.Contains(t, idsOf(page), ids[2])
	page, err = st.SearchSessions(ctx, store.SessionFilter{IDPrefix: "ses_%"}, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, page.Items, "a LIKE wildcard in the search is literal")
}
