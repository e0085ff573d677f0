package cli

import (
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"testing"
)

func TestVersion(t *testing.T) {
	const hash = "79502d772e349aa8713a332d4455d4136f7a9250"
	stamped := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261205123622-79502d772e34+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tt := range []struct {
		name     string
		info     *debug.BuildInfo
		rev, mod string
		want     string
	}{
		{"make build, clean tree", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, hash, "false", "devel (commit " + hash + ")"},
		{"make build, modified tree", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, hash, "true", "devel (commit " + hash + ", modified)"},
		{"stamped by the go command", stamped, "", "", "v0.0.0-20261205123622-79502d772e34+dirty (commit 0123456789abcdef0123456789abcdef01234567, modified)"},
		{"make build wins over the stamp", stamped, hash, "false", "v0.0.0-20261205123622-79502d772e34+dirty (commit " + hash + ")"},
		{"tagged install", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "", "", "v1.4.0 (commit unknown)"},
		{"nothing known", nil, "", "", "devel (commit unknown)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := version(tt.info, tt.rev, tt.mod); got != tt.want {
				t.Errorf("version() = %q, want %q", got, tt.want)
			}
		})
	}
}

// `make build` sets the variables Version reads: the Makefile's -X flags
// name them.
func TestMakeBuildSetsTheCommit(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var set []string
	for _, m := range regexp.MustCompile(`-X \$\(MODULE\)/internal/cli\.([a-z]+)=`).FindAllSubmatch(makefile, -1) {
		set = append(set, string(m[1]))
	}
	slices.Sort(set)
	if want := []string{"modified", "revision"}; !slices.Equal(set, want) {
		t.Errorf("the Makefile sets internal/cli's %v with -X, want %v", set, want)
	}
	_, _ = revision, modified // the variables those names refer to
}
