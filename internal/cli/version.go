package cli

import "runtime/debug"

// The commit a binary was built from, set by `make build` with -ldflags -X
// (the Makefile's VERSION_LDFLAGS). The go command stamps vcs.revision into
// the build info only when it builds in the repository's main checkout with
// -buildvcs on: not in a git worktree, not under GOFLAGS=-buildvcs=false,
// not from a source tree without .git (the Docker build context).
var (
	revision string // the commit's full hash
	modified string // "true" when the tree had uncommitted changes
)

// Version returns the version of the running binary and the commit it was
// built from: "<version> (commit <hash>)", with ", modified" when the tree
// had uncommitted changes. The version is the main module's (a tagged
// `go install`), else "devel"; the commit is what `make build` set, else
// the go command's vcs.revision and vcs.modified, else "unknown".
func Version() string {
	info, _ := debug.ReadBuildInfo()
	return version(info, revision, modified)
}

// version is Version for the build info info (nil when there is none) and
// the values set by -ldflags -X.
func version(info *debug.BuildInfo, rev, mod string) string {
	v := "devel"
	if info != nil {
		if info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		if rev == "" {
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					mod = s.Value
				}
			}
		}
	}
	if rev == "" {
		return v + " (commit unknown)"
	}
	if mod == "true" {
		return v + " (commit " + rev + ", modified)"
	}
	return v + " (commit " + rev + ")"
}
