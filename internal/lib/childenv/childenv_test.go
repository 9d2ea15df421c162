package childenv

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBuild(t *testing.T) {
	environ := []string{"PATH=/bin", "HOME=/root", "BAE_DATABASE_URL=postgres://x", "LC_ALL=C", "TOKEN=secret", "TMPDIR=/tmp", "TZ=UTC", "LANG=C.UTF-8", "LANGUAGE=en"}
	got := Build(environ, map[string]string{"HOME": "/srv", "B": "2", "A": "1"})
	assert.Equal(t, []string{"PATH=/bin", "LC_ALL=C", "TMPDIR=/tmp", "TZ=UTC", "LANG=C.UTF-8", "LANGUAGE=en", "A=1", "B=2", "HOME=/srv"}, got)
	assert.Empty(t, Build([]string{"SECRET=x"}, nil))
}
