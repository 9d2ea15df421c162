// Package testlog holds what tests need to read logs that concurrent
// goroutines write. It imports nothing of bae-go, so any package's tests
// may use it.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a log sink that concurrent writers may share and a test may
// read at any time (testenv.Options.LogOutput, a slog handler).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
