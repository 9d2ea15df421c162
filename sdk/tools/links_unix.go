//go:build unix

package tools

import (
	"io/fs"
	"syscall"
)

// linkCount is the number of hard links to the file behind info.
func linkCount(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink) //nolint:unconvert // Nlink's width varies by platform
	}
	return 1
}
