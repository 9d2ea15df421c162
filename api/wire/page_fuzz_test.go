package wire

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func FuzzPageParams(f *testing.F) {
	for _, q := range []string{
		"", "cursor=", "limit=", "cursor=0", "cursor=42&limit=10", "limit=1", "limit=200", "limit=201",
		"limit=0", "limit=-1", "limit=+5", "limit=1e3", "limit=0x10", "limit=9223372036854775808",
		"limit=99999999999999999999", "cursor=-1", "cursor=9223372036854775807", "cursor=9223372036854775808",
		"cursor=abc", "cursor=1.5", "cursor=%20", "cursor=%zz", "limit=5&limit=abc", "limit=&limit=5",
		"cursor=1&cursor=x", ";limit=5", "limit=5;cursor=1", "limit", "=&&=", "limit=%00", "cursor=%2B7",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/sessions/s/events", nil)
		// Set directly: a query NewRequest cannot parse is still a query
		// a handler may be given.
		r.URL.RawQuery = rawQuery
		after, limit, err := ParsePage(r.URL.Query())
		if err != nil {
			assert.NotEmpty(t, err.Error())
			return
		}
		assert.GreaterOrEqual(t, limit, 1)
		assert.LessOrEqual(t, limit, MaxLimit)
		assert.GreaterOrEqual(t, after, int64(0))

		q := r.URL.Query()
		if c := q.Get("cursor"); c != "" {
			v, err := strconv.ParseInt(c, 10, 64)
			require.NoError(t, err, "accepted cursor %q", c)
			assert.Equal(t, v, after)
		} else {
			assert.Zero(t, after)
		}
		if l := q.Get("limit"); l != "" {
			v, err := strconv.Atoi(l)
			require.NoError(t, err, "accepted limit %q", l)
			assert.Equal(t, min(v, MaxLimit), limit)
		} else {
			assert.Equal(t, DefaultLimit, limit)
		}
	})
}
