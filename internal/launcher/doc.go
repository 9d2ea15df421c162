// Package launcher runs users' own agent harness programs for BAE's
// launchers (baesched on schedules, baeapi on HTTP triggers), on Temporal:
// every run is a Launch workflow whose RunAgent activity spawns the child on
// the launcher's own task queue.
//
// This file's siblings each hold one piece: envref.go resolves ${VAR}
// secrets, spawn.go runs a child and forwards its attributed lines,
// workflow.go is the Launch workflow, runner.go its activity, exit.go the
// exit codes shared by both binaries. The two launchers' configuration and
// serving live in the subpackages schedule and trigger.
package launcher
