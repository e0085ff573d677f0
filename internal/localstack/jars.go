package localstack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/eventforge/eventforge/internal/filelock"
)

// Jars is a Java class path resolved from Maven Central, and the java
// program to run it with.
type Jars struct {
	// LibsDir holds every jar of the class path: pass LibsDir+"/*" to -cp.
	LibsDir string
	// Java is the java program the stack runs its broker with (Java 17+).
	Java string
}

// ResolveJars resolves the dependencies of pom (a <packaging>pom</packaging>
// project listing pinned artifacts) into <state dir>/<name>/libs with Maven,
// as the stack resolves the broker's class path, and returns it with the
// java program to run it. The jars are resolved once per pom content; a
// later call with the same pom finds them in place. Java and Maven are
// installed as Up installs them. Calls for the same name are serialised by
// a lock in the state dir.
func ResolveJars(ctx context.Context, cfg Config, name string, pom []byte, log *slog.Logger) (Jars, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Jars{}, fmt.Errorf("validating local stack config: %w", err)
	}
	if name == "" || name != filepath.Base(name) || name == "kafka" || strings.HasPrefix(name, "pg") {
		return Jars{}, fmt.Errorf("class path name %q: want one path element that names no stack directory", name)
	}
	dir := filepath.Join(cfg.StateDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Jars{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	unlock, err := filelock.Lock(ctx, filepath.Join(dir, "lock"), name+" class path", log)
	if err != nil {
		return Jars{}, err
	}
	defer unlock()
	t, err := ensurePrerequisites(ctx, realHost(log), log)
	if err != nil {
		return Jars{}, fmt.Errorf("checking prerequisites: %w", err)
	}
	libs := filepath.Join(dir, "libs")
	if err := resolveJars(ctx, dir, libs, pom, t.mvn, log.With("class_path", name)); err != nil {
		return Jars{}, fmt.Errorf("resolving %s jars: %w", name, err)
	}
	return Jars{LibsDir: libs, Java: t.java}, nil
}

// resolveJars writes pom to dir/pom.xml and copies its class path into libs
// with Maven's dependency plugin, unless libs already holds the jars of the
// same pom (its hash in libs/.pom.sha256). The jars land in a temporary
// directory first, so an interrupted run leaves no partial class path.
func resolveJars(ctx context.Context, dir, libs string, pom []byte, mvn string, log *slog.Logger) error {
	hash := pomHash(pom)
	if b, err := os.ReadFile(filepath.Join(libs, pomHashFile)); err == nil && strings.TrimSpace(string(b)) == hash {
		return nil
	}
	pomPath := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pomPath, pom, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", pomPath, err)
	}
	tmp := libs + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("removing %s: %w", tmp, err)
	}
	begin := time.Now()
	log.Info("resolving jars with maven", "pom", pomPath, "libs_dir", libs)
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-f", pomPath, "-DoutputDirectory="+tmp, dependencyPlugin)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("running mvn: %w\n%s", err, lastLines(string(out), 30))
	}
	jars, _ := filepath.Glob(filepath.Join(tmp, "*.jar"))
	if len(jars) == 0 {
		return fmt.Errorf("mvn copied no jars into %s", tmp)
	}
	if err := os.WriteFile(filepath.Join(tmp, pomHashFile), []byte(hash+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing pom hash: %w", err)
	}
	if err := os.RemoveAll(libs); err != nil {
		return fmt.Errorf("removing old %s: %w", libs, err)
	}
	if err := os.Rename(tmp, libs); err != nil {
		return fmt.Errorf("moving jars into place: %w", err)
	}
	log.Info("jars resolved", "jars", len(jars), "elapsed_ms", time.Since(begin).Milliseconds())
	return nil
}
