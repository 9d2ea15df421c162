//go:build !unix

package tools

import "io/fs"

// linkCount is not available here; files are treated as singly linked.
func linkCount(fs.FileInfo) uint64 { return 1 }
