package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseIdempotencyKey(t *testing.T) {
	for _, ok := range []struct{ in, want string }{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{`"quoted_key.1:~"`, "quoted_key.1:~"},
		{"a", "a"},
		{strings.Repeat("k", MaxIdempotencyKeyLen), strings.Repeat("k", MaxIdempotencyKeyLen)},
	} {
		got, bad := ParseIdempotencyKey([]string{ok.in})
		require.Nil(t, bad, ok.in)
		assert.Equal(t, ok.want, got)
	}
	got, bad := ParseIdempotencyKey(nil)
	require.Nil(t, bad)
	assert.Empty(t, got, "no header, no key")

	for _, in := range [][]string{
		{""}, {`""`}, {strings.Repeat("k", MaxIdempotencyKeyLen+1)},
		{"has space"}, {"semi;colon"}, {"slash/"}, {"nul\x00"}, {"é"}, {`"unbalanced`},
		{"a", "b"},
	} {
		_, bad := ParseIdempotencyKey(in)
		require.NotNil(t, bad, "%q", in)
		assert.Equal(t, -32602, bad.Code, "%q", in)
	}
}
