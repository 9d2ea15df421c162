package app

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}

	assert.Equal(t, 150, TuneGC(env(map[string]string{"GOGC": "150"})), "GOGC set: left to the runtime")
	assert.Equal(t, 100, debug.SetGCPercent(100), "and not changed")
	assert.Equal(t, -1, TuneGC(env(map[string]string{"GOGC": "off"})))

	assert.Equal(t, DefaultGCPercent, TuneGC(env(nil)))
	assert.Equal(t, DefaultGCPercent, debug.SetGCPercent(100), "unset: baesrv's default applied")
	assert.Equal(t, DefaultGCPercent, TuneGC(env(map[string]string{"GOGC": " "})), "blank counts as unset")
}
