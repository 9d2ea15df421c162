// Package schedule is baesched: each agent of bae-schedules.toml becomes a
// Temporal Schedule whose fires run the agent through the Launch workflow.
package schedule

import (
	"fmt"
	"strings"

	"github.com/robfig/cron/v3"

	"github.com/bae-go/bae-go/internal/launcher"
)

// Agent is one [[agents]] entry of bae-schedules.toml.
type Agent struct {
	Name       string            `toml:"name"`
	Command    string            `toml:"command"`
	Args       []string          `toml:"args"`
	Env        map[string]string `toml:"env"`
	WorkingDir string            `toml:"working_dir"`
	Schedule   string            `toml:"schedule"`
}

// File is bae-schedules.toml.
type File struct {
	Agents []Agent `toml:"agents"`
}

// cronParser takes BAE's six fields: sec min hour day month day-of-week.
var cronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// Load reads and checks the file at path. A missing file gives no agents
// and found false; every other problem, an unreadable file included, is a
// *launcher.UsageError (exit 2): "failed to read schedule config: <path>: …"
// or "invalid schedule config: <path>: …", BAE's words first.
func Load(path string) (f File, found bool, err error) {
	data, found, err := launcher.ReadFile(path)
	if err != nil {
		return File{}, true, &launcher.UsageError{Msg: "failed to read schedule config: " + err.Error()}
	}
	if !found {
		return File{}, false, nil
	}
	f, err = parse(path, data)
	return f, true, launcher.Prefixed(err, "invalid schedule config: ")
}

func parse(path string, data []byte) (f File, err error) {
	if err := launcher.DecodeConfig(path, data, &f); err != nil {
		return File{}, err
	}
	names := make([]string, len(f.Agents))
	for i, a := range f.Agents {
		names[i] = a.Name
	}
	if err := launcher.CheckNames(path, names); err != nil {
		return File{}, err
	}
	for _, a := range f.Agents {
		if strings.TrimSpace(a.Command) == "" {
			return File{}, &launcher.UsageError{Msg: fmt.Sprintf("%s: agent %q has no command", path, a.Name)}
		}
		if err := checkCron(a.Schedule); err != nil {
			return File{}, &launcher.UsageError{Msg: fmt.Sprintf("%s: agent %q: invalid schedule %q: %v", path, a.Name, a.Schedule, err)}
		}
		if err := launcher.CheckEnvMap(path, a.Name, a.Env); err != nil {
			return File{}, err
		}
	}
	return f, nil
}

func checkCron(expr string) error {
	if n := len(strings.Fields(expr)); n != 6 {
		return fmt.Errorf("expected a six-field cron expression: sec min hour day month day-of-week (got %d fields)", n)
	}
	_, err := cronParser.Parse(expr)
	return err
}

// temporalCron is the schedule in Temporal's cron syntax, whose seven-field
// form is sec min hour day month day-of-week year.
func temporalCron(expr string) string {
	return strings.Join(strings.Fields(expr), " ") + " *"
}
