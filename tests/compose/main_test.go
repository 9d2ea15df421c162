// Package compose tests docker-compose.yml, docker-compose.production.yml,
// Dockerfile and launchers/Dockerfile on a machine that cannot pull images:
// both compose shapes through `docker compose config`, both Dockerfiles
// built on stand-in base images and run, and the development shape run end
// to end with stand-in images swapped in by an override file.
//
// Everything a run creates carries the label bae-go.test=<run id>; TestMain
// removes what carries it however the tests end, and each test removes its
// own as it goes.
package compose

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bae-go/bae-go/internal/lib/ids"
)

// labelKey labels every container, network, volume and image a run creates.
const labelKey = "bae-go.test"

// runID tells this run's objects from another run's (or another checkout's)
// on the same engine.
var runID = "compose-" + strings.ToLower(ids.New("")[:10])

func TestMain(m *testing.M) {
	// A run killed before its cleanup (a go test timeout) leaves its
	// objects behind; they go at the next run, once old enough that no
	// run in progress (here or in another checkout) can own them.
	if err := sweepStale(staleAfter); err != nil {
		fmt.Fprintln(os.Stderr, "compose tests: remove a killed run's leftovers:", err)
	}
	code := m.Run()
	if err := sweep(); err != nil {
		fmt.Fprintln(os.Stderr, "compose tests: cleanup:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// sweep removes every object labelled with this run, containers first
// (they hold the networks, volumes and images).
func sweep() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	filter := "label=" + labelKey + "=" + runID
	var errs []string
	for _, k := range []struct{ list, remove []string }{
		{[]string{"ps", "-aq", "--filter", filter}, []string{"rm", "-f", "-v"}},
		{[]string{"network", "ls", "-q", "--filter", filter}, []string{"network", "rm"}},
		{[]string{"volume", "ls", "-q", "--filter", filter}, []string{"volume", "rm", "-f"}},
		{[]string{"images", "-q", "--filter", filter}, []string{"rmi", "-f"}},
	} {
		out, err := exec.CommandContext(ctx, "docker", k.list...).Output()
		if err != nil {
			errs = append(errs, fmt.Sprintf("docker %s: %v", strings.Join(k.list, " "), err))
			continue
		}
		found := dedupe(strings.Fields(string(out)))
		if len(found) == 0 {
			continue
		}
		if out, err := exec.CommandContext(ctx, "docker", append(k.remove, found...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("docker %s: %v: %s", strings.Join(k.remove, " "), err, out))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// staleAfter is well beyond a run's length (a few minutes; the package's
// test timeout in make test is 25).
const staleAfter = time.Hour

// sweepStale removes labelled objects of any run created more than age
// ago: containers by their creation time, then the networks, volumes and
// images no container holds any more.
func sweepStale(age time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cutoff := time.Now().Add(-age)
	out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--filter", "label="+labelKey, "--format", "{{.ID}}\t{{.CreatedAt}}").Output()
	if err != nil {
		return fmt.Errorf("docker ps: %w", err)
	}
	var old []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, created, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		// e.g. 2026-12-06 03:20:00 +0000 UTC
		if at, err := time.Parse("2006-01-02 15:04:05 -0700 MST", created); err == nil && at.Before(cutoff) {
			old = append(old, id)
		}
	}
	if len(old) > 0 {
		if out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f", "-v"}, old...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("docker rm: %w: %s", err, out)
		}
	}
	until := fmt.Sprintf("until=%dm", int(age.Minutes()))
	for _, args := range [][]string{
		{"network", "prune", "-f", "--filter", "label=" + labelKey, "--filter", until},
		{"image", "prune", "-a", "-f", "--filter", "label=" + labelKey, "--filter", until},
	} {
		if out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("docker %s: %w: %s", strings.Join(args[:2], " "), err, out)
		}
	}
	// Volumes have no until filter: their creation time decides.
	out, err = exec.CommandContext(ctx, "docker", "volume", "ls", "-q", "--filter", "label="+labelKey, "--filter", "dangling=true").Output()
	if err != nil {
		return fmt.Errorf("docker volume ls: %w", err)
	}
	for _, v := range strings.Fields(string(out)) {
		created, err := exec.CommandContext(ctx, "docker", "volume", "inspect", "--format", "{{.CreatedAt}}", v).Output()
		if err != nil {
			continue // removed meanwhile
		}
		if at, err := time.Parse(time.RFC3339, strings.TrimSpace(string(created))); err == nil && at.Before(cutoff) {
			_ = exec.CommandContext(ctx, "docker", "volume", "rm", v).Run()
		}
	}
	return nil
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// repoRoot is the checkout this package belongs to.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// run runs a command and returns its stdout; a failure fails the test with
// the command's output.
func run(t testing.TB, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(ctx, dir, env, name, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

func runErr(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, tailOf(stdout.String()), tailOf(stderr.String()))
	}
	return stdout.String(), nil
}

func tailOf(s string) string {
	const n = 6000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
