package ids

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIDShapes(t *testing.T) {
	assert.Regexp(t, regexp.MustCompile(`^ses_[0-9a-f]{32}$`), New(SessionPrefix))
	assert.Regexp(t, regexp.MustCompile(`^bae_ses_[0-9a-f]{48}$`), NewSecret(SessionKeyPrefix))
	assert.Regexp(t, regexp.MustCompile(`^bae_admin_[0-9a-f]{48}$`), NewSecret(AdminKeyPrefix))
	assert.NotEqual(t, New(EventPrefix), New(EventPrefix))
}

func TestHashing(t *testing.T) {
	s := NewSecret(ClientKeyPrefix)
	h := HashSecret(s)
	require.True(t, EqualHash(h, HashSecret(s)))
	require.False(t, EqualHash(h, HashSecret(s+"x")))
	assert.NotContains(t, h, s[4:])
	assert.Equal(t, "bae_"+s[4:8], DisplayPrefix(s, ClientKeyPrefix))
}
