// Package version reports which build of bae-go is running, for the CLIs'
// --version flag.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Revision is the Git revision, set at link time by `make build`
// (-ldflags "-X github.com/bae-go/bae-go/internal/lib/version.Revision=…").
// When empty, the revision the go command stamped into the binary is used
// (absent under -buildvcs=false or outside a Git checkout).
var Revision string

// String is the one-line version text: module version, Git revision and Go
// version, e.g. "(devel) rev 1a2b3c4d5e6f go1.27.3".
func String() string {
	mod, rev, dirty := "(devel)", Revision, false
	fromLinker := rev != ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			mod = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
					if len(rev) > 12 {
						rev = rev[:12]
					}
				}
			case "vcs.modified":
				dirty = !fromLinker && s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return fmt.Sprintf("%s rev %s %s", mod, rev, runtime.Version())
}
