//go:build unix

package mcp

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the stdio server in its own process group, so that
// wrappers such as npx or uvx, which fork the real server, can be torn down
// as a whole.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup kills whatever is left of the stdio server's process
// group. It runs after the leader has been reaped, so it only hits
// grandchildren that outlived their parent; ESRCH (nothing left) is expected.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
