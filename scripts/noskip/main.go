// Command noskip reads `go test -json` on stdin, prints what a plain
// `go test` would (package results, and the output of failing tests only),
// and exits 1 when a test failed or was skipped. `make test` pipes the whole
// suite through it: a skip there hides a path nobody tested, so it fails the
// run unless the allowlist (-allow FILE) names the test with a reason.
//
// Allowlist lines: "<package import path> <test name> <reason...>"; blank
// lines and lines starting with # are ignored.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	allowFile := flag.String("allow", "", "allowlist `FILE` of tests that may skip")
	flag.Parse()
	allow, err := readAllowlist(*allowFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "noskip:", err)
		os.Exit(2)
	}
	if err := filter(os.Stdin, os.Stdout, allow); err != nil {
		fmt.Fprintln(os.Stderr, "noskip:", err)
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json), build events included.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

func readAllowlist(path string) (map[string]string, error) {
	allow := map[string]string{}
	if path == "" {
		return allow, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read allowlist: %w", err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("%s:%d: want \"<package> <test> <reason>\"", path, i+1)
		}
		allow[f[0]+" "+f[1]] = strings.Join(f[2:], " ")
	}
	return allow, nil
}

// filter copies the report from r to w and returns an error naming every
// failed package and every skipped test the allowlist does not excuse.
func filter(r io.Reader, w io.Writer, allow map[string]string) error {
	buffered := map[string][]string{} // package+test -> its output so far
	var failedPkgs, skips []string
	packages := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Fprintf(w, "%s\n", line) // not JSON: pass it on
			continue
		}
		if e.Action == "build-output" {
			fmt.Fprint(w, e.Output)
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "output" && e.Test == "":
			if strings.TrimSpace(e.Output) != "PASS" { // plain go test prints no PASS line
				fmt.Fprint(w, e.Output)
			}
		case e.Action == "output":
			buffered[key] = append(buffered[key], e.Output)
		case e.Test == "" && e.Action == "fail":
			failedPkgs = append(failedPkgs, e.Package)
			packages++
		case e.Test == "" && (e.Action == "pass" || e.Action == "skip"):
			packages++
		case e.Action == "fail":
			printFailure(w, buffered[key])
			delete(buffered, key)
		case e.Action == "skip":
			if _, ok := allow[key]; !ok {
				skips = append(skips, skipReport(key, buffered[key]))
			}
			delete(buffered, key)
		case e.Action == "pass":
			delete(buffered, key)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read go test -json: %w", err)
	}
	// A package that died (a panic, the -timeout) leaves its running tests
	// without an end event: their output is the clue.
	failed := map[string]bool{}
	for _, p := range failedPkgs {
		failed[p] = true
	}
	keys := make([]string, 0, len(buffered))
	for k := range buffered {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if pkg, _, _ := strings.Cut(k, " "); failed[pkg] {
			printFailure(w, buffered[k])
		}
	}
	var errs []error
	if packages == 0 {
		errs = append(errs, errors.New("go test reported no package"))
	}
	if len(failedPkgs) > 0 {
		errs = append(errs, fmt.Errorf("%d package(s) failed: %s", len(failedPkgs), strings.Join(failedPkgs, ", ")))
	}
	if len(skips) > 0 {
		sort.Strings(skips)
		fmt.Fprintf(w, "\n%d test(s) skipped; a skip hides an untested path (make the test run here, or add it with a reason to the allowlist):\n%s",
			len(skips), strings.Join(skips, ""))
		errs = append(errs, fmt.Errorf("%d test(s) skipped", len(skips)))
	}
	return errors.Join(errs...)
}

// printFailure prints a failed test's output as plain go test does, without
// the === RUN/PAUSE/CONT lines of -json's verbose mode.
func printFailure(w io.Writer, output []string) {
	for _, o := range output {
		if !strings.HasPrefix(o, "=== ") {
			fmt.Fprint(w, o)
		}
	}
}

// skipReport is "package test: reason", the reason taken from the test's
// own output (the t.Skip message follows its --- SKIP line).
func skipReport(key string, output []string) string {
	var reason []string
	for _, o := range output {
		o = strings.TrimSpace(o)
		if o == "" || strings.HasPrefix(o, "=== ") || strings.HasPrefix(o, "--- SKIP") {
			continue
		}
		reason = append(reason, o)
	}
	return fmt.Sprintf("  %s: %s\n", key, strings.Join(reason, " "))
}
