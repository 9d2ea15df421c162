package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bae-schedules.toml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// Everything here is decided before Temporal is dialled: BAE_TEMPORAL_ADDR
// points nowhere, so reaching the dial would exit 1 for the wrong reason.
func TestExitCodesBeforeTemporal(t *testing.T) {
	good := writeFile(t, "[[agents]]\nname = \"a\"\ncommand = \"true\"\nschedule = \"0 0 3 * * *\"\n")
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
		code int
		says string
	}{
		// BAE's words first ("invalid schedule config"), then which file and why.
		"singular agent table":  {env: map[string]string{"BAE_SCHEDULES_CONFIG": writeFile(t, "[agent]\nname = \"a\"\n")}, code: 2, says: "invalid schedule config: "},
		"unknown top-level key": {env: map[string]string{"BAE_SCHEDULES_CONFIG": writeFile(t, "[[agnts]]\nname = \"a\"\n")}, code: 2, says: "invalid schedule config: "},
		"bad toml":              {env: map[string]string{"BAE_SCHEDULES_CONFIG": writeFile(t, "[[agents]]\nname = \"a\"\ncommand = [not valid\n")}, code: 2, says: "invalid schedule config: "},
		"five cron fields":      {env: map[string]string{"BAE_SCHEDULES_CONFIG": writeFile(t, "[[agents]]\nname = \"nightly\"\ncommand = \"true\"\nschedule = \"0 3 * * *\"\n")}, code: 2, says: `invalid schedule config: `},
		"blank name":            {env: map[string]string{"BAE_SCHEDULES_CONFIG": writeFile(t, "[[agents]]\nname = \" \"\ncommand = \"true\"\nschedule = \"0 0 3 * * *\"\n")}, code: 2, says: "invalid schedule config: "},
		"timeout not a number":  {env: map[string]string{"BAE_SCHEDULES_CONFIG": good, "BAE_SCHEDULES_SHUTDOWN_TIMEOUT": "ten"}, code: 2, says: "BAE_SCHEDULES_SHUTDOWN_TIMEOUT"},
		"catch-up not a number": {env: map[string]string{"BAE_SCHEDULES_CONFIG": good, "BAE_SCHEDULES_CATCHUP_WINDOW": "1h"}, code: 2, says: "BAE_SCHEDULES_CATCHUP_WINDOW"},
		"catch-up too short":    {env: map[string]string{"BAE_SCHEDULES_CONFIG": good, "BAE_SCHEDULES_CATCHUP_WINDOW": "5"}, code: 2, says: "10 seconds"},
		// Unlike baeapi, an unreadable file is a usage error for baesched, as in BAE.
		"unreadable config": {env: map[string]string{"BAE_SCHEDULES_CONFIG": t.TempDir()}, code: 2, says: "failed to read schedule config: "},
		"extra argument":    {env: map[string]string{"BAE_SCHEDULES_CONFIG": good}, args: []string{"now"}, code: 2, says: "now"},
		"bad runs flag":     {env: map[string]string{}, args: []string{"runs", "--limit", "many"}, code: 2, says: "limit"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.env["BAE_TEMPORAL_ADDR"] = "127.0.0.1:1"
			var stdout, stderr strings.Builder
			code := execute(context.Background(), tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, &stdout, &stderr)
			assert.Equal(t, tc.code, code, stderr.String())
			assert.Contains(t, stderr.String(), tc.says)
			assert.NotContains(t, stderr.String(), "connect to temporal")
		})
	}
}
