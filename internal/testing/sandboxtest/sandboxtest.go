// Package sandboxtest gives tests a sandbox image of their own on the real
// Docker engine, and owns what it creates: when the test ends, however it
// ends, the image goes, and with it every container started from it, by
// the test itself or by a server under test.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/sandbox"
)

// RequireEngine skips t when no Docker engine answers.
func RequireEngine(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sandbox.EngineAvailable(ctx); err != nil {
		t.Skipf("docker engine not reachable: %v", err)
	}
}

// Image builds a busybox image named name:<random tag> for t (no registry
// needed) and returns its reference. It skips t when no engine answers.
//
// The removal is registered before the build, so a half-imported image
// goes too. It runs when t's cleanups reach it (they run last registered
// first): call Image before starting a server that uses the image, so the
// server has stopped by then and cannot start another container.
func Image(t testing.TB, name string) string {
	t.Helper()
	RequireEngine(t)
	var b [6]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	tag := name + ":" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sandbox.RemoveTestImage(ctx, tag); err != nil {
			t.Errorf("test sandbox image: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, sandbox.BuildBusyboxImage(ctx, tag, t.Name()))
	return tag
}
