package pgbin

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEnsure installs (or finds in the machine's cache) every supported
// version and runs its programs.
func TestEnsure(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, major := range Supported() {
		t.Run(Source(major), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			begin := time.Now()
			d, err := Ensure(ctx, major, "", log)
			if err != nil {
				t.Fatalf("Ensure(%d): %v", major, err)
			}
			t.Logf("Ensure(%d) took %v: %s", major, time.Since(begin).Round(time.Millisecond), d.BinDir)
			if d.Major != major {
				t.Errorf("Major = %d, want %d", d.Major, major)
			}
			for _, prog := range []string{"initdb", "pg_ctl", "postgres"} {
				cmd := exec.CommandContext(ctx, d.Path(prog), "--version")
				cmd.Env = d.Env()
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s --version: %v\n%s", prog, err, out)
				}
				if want := "(PostgreSQL) " + strconv.Itoa(major) + "."; !strings.Contains(string(out), want) {
					t.Errorf("%s --version = %q, want it to contain %q", prog, out, want)
				}
			}
			if major != DefaultMajor {
				if !fileExists(filepath.Join(d.LibDir, "postgresql", "pgoutput.so")) {
					t.Errorf("%s has no pgoutput.so", d.LibDir)
				}
				if !strings.Contains(d.Source, pins[major].version) {
					t.Errorf("Source = %q, want the pinned version %s", d.Source, pins[major].version)
				}
			}
		})
	}
}

// TestEnsureConcurrentFreshCache installs one version into an empty cache
// from two goroutines at once: the lock lets one install and the other find
// it, and the cache is readable by other users.
func TestEnsureConcurrentFreshCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cache := filepath.Join(t.TempDir(), "pgbin")
	var wg sync.WaitGroup
	dists := make([]Dist, 2)
	errs := make([]error, 2)
	begin := time.Now()
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dists[i], errs[i] = Ensure(ctx, 16, cache, log)
		}()
	}
	wg.Wait()
	t.Logf("fresh install of 16 took %v", time.Since(begin).Round(time.Millisecond))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Ensure #%d: %v", i, err)
		}
	}
	if dists[0] != dists[1] {
		t.Errorf("two installs differ: %+v vs %+v", dists[0], dists[1])
	}
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{pins[16].version, "lock"}; strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("cache holds %v, want %v (no scratch dirs left)", names, want)
	}
	for p, want := range map[string]os.FileMode{
		cache:                   0o005,
		dists[0].BinDir:         0o005,
		dists[0].Path("initdb"): 0o005,
		filepath.Join(dists[0].LibDir, "postgresql", "pgoutput.so"): 0o004,
	} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&want != want {
			t.Errorf("%s has mode %v, want the other-user bits %v", p, st.Mode().Perm(), want)
		}
	}
}

func TestCheckIntegrity(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.tgz")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	// sha512("abc") in base64.
	good := "sha512-3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6PCOj/uu9RU1EI2Q86A4qmslPpUyknw=="
	if err := checkIntegrity(p, good); err != nil {
		t.Errorf("matching integrity: %v", err)
	}
	if err := checkIntegrity(p, pins[17].integrity); err == nil {
		t.Error("a different tarball passed the integrity check")
	}
	if err := checkIntegrity(p, "sha1-abc"); err == nil {
		t.Error("a non-sha512 integrity was accepted")
	}
}

func TestSupported(t *testing.T) {
	if got := Supported(); len(got) != 4 || got[0] != 15 || got[3] != 18 {
		t.Errorf("Supported() = %v, want [15 16 17 18]", got)
	}
	if IsSupported(14) || IsSupported(19) || !IsSupported(17) {
		t.Error("IsSupported disagrees with Supported")
	}
	if _, err := Ensure(context.Background(), 14, t.TempDir(), slog.Default()); err == nil {
		t.Error("Ensure(14) succeeded")
	}
}
