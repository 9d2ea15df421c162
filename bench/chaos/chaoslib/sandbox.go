package chaoslib

import "fmt"

// counterDir holds one counter file per sandbox turn in the container:
// every run of the command appends a line, so "ran twice" is two lines.
const counterDir = "/tmp/chaos"

// sandboxCommand appends a line to the turn's counter and runs for a
// moment (the window a fault lands in).
func sandboxCommand(tag string) string {
	return fmt.Sprintf("mkdir -p %s && echo run >> %s/%s && sleep 0.5 && wc -l < %s/%s", counterDir, counterDir, tag, counterDir, tag)
}
