//go:build unix

package tools

import (
	"os/exec"
	"syscall"
)

// killGroup runs the command in its own process group and kills the whole
// group on cancellation: `sh -c` would otherwise leave its children running.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
