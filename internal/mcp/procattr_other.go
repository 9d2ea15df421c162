//go:build !unix

package mcp

import "os/exec"

// setProcessGroup is a no-op where process groups are unavailable.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup is a no-op where process groups are unavailable; the
// transport still terminates and reaps the direct child.
func killProcessGroup(*exec.Cmd) {}
