package localstack

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// pgBin holds the PostgreSQL 15 server programs (Debian layout).
const pgBin = "/usr/lib/postgresql/15/bin"

// minJava is the oldest Java major version Kafka 4 brokers run on.
const minJava = 17

// Debian packages that provide what the stack runs.
const (
	pkgPostgres = "postgresql-15"
	pkgJava     = "default-jre-headless"
	pkgMaven    = "maven"
)

// host abstracts the machine for the prerequisite check so its decisions can
// be tested without installing anything.
type host struct {
	euid      func() int
	exists    func(path string) bool
	lookPath  func(file string) (string, error)
	javaMajor func(ctx context.Context, java string) (int, error)
	run       func(ctx context.Context, name string, args ...string) error
}

// realHost is the machine this process runs on.
func realHost(log *slog.Logger) host {
	return host{
		euid:      os.Geteuid,
		exists:    fileExists,
		lookPath:  exec.LookPath,
		javaMajor: javaMajor,
		run: func(ctx context.Context, name string, args ...string) error {
			log.Info("running", "command", name+" "+strings.Join(args, " "))
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %w\n%s", name, err, lastLines(string(out), 20))
			}
			return nil
		},
	}
}

// tools are the programs the stack runs, resolved to paths.
type tools struct {
	java string
	mvn  string
}

// missingPackages returns the Debian packages that would provide what is
// missing, in a stable order, and the tools found.
func missingPackages(ctx context.Context, h host) ([]string, tools) {
	var missing []string
	var t tools
	if !h.exists(pgBin+"/initdb") || !h.exists(pgBin+"/pg_ctl") {
		missing = append(missing, pkgPostgres)
	}
	if java, err := h.lookPath("java"); err != nil {
		missing = append(missing, pkgJava)
	} else if v, err := h.javaMajor(ctx, java); err != nil || v < minJava {
		missing = append(missing, pkgJava)
	} else {
		t.java = java
	}
	if mvn, err := h.lookPath("mvn"); err != nil {
		missing = append(missing, pkgMaven)
	} else {
		t.mvn = mvn
	}
	return missing, t
}

// ensurePrerequisites checks for PostgreSQL 15, Java 17+ and Maven. What is
// missing is installed with apt-get when this process is root on a machine
// that has it; otherwise the error names the command to run.
func ensurePrerequisites(ctx context.Context, h host, log *slog.Logger) (tools, error) {
	missing, t := missingPackages(ctx, h)
	if len(missing) == 0 {
		return t, nil
	}
	install := "apt-get install -y " + strings.Join(missing, " ")
	if _, err := h.lookPath("apt-get"); err != nil {
		return tools{}, fmt.Errorf("missing PostgreSQL 15 server, Java %d+ or Maven (Debian packages %s): install them and retry", minJava, strings.Join(missing, ", "))
	}
	if h.euid() != 0 {
		return tools{}, fmt.Errorf("missing packages %s: run `sudo apt-get update && sudo %s`", strings.Join(missing, ", "), install)
	}
	log.Info("installing missing packages", "packages", strings.Join(missing, " "))
	if err := h.run(ctx, "apt-get", "update"); err != nil {
		return tools{}, fmt.Errorf("updating package lists: %w", err)
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, missing...)
	if err := h.run(ctx, "apt-get", args...); err != nil {
		return tools{}, fmt.Errorf("installing %s: %w", strings.Join(missing, " "), err)
	}
	still, t := missingPackages(ctx, h)
	if len(still) > 0 {
		hint := "apt-get install -y " + strings.Join(still, " ")
		if len(still) == 1 && still[0] == pkgJava {
			hint = "apt-get install -y openjdk-17-jre-headless"
		}
		return tools{}, fmt.Errorf("still missing %s after installing: run `%s` or install them by hand", strings.Join(still, ", "), hint)
	}
	return t, nil
}

// javaMajor runs `java -version` and returns the major version.
func javaMajor(ctx context.Context, java string) (int, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, java, "-version")
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("running %s -version: %w", java, err)
	}
	return parseJavaMajor(out.String())
}

var javaVersionRE = regexp.MustCompile(`version "([0-9]+)(?:\.([0-9]+))?[^"]*"`)

// parseJavaMajor extracts the major version from `java -version` output:
// "1.8.0_402" is 8, "17.0.15" is 17, "21" is 21.
func parseJavaMajor(out string) (int, error) {
	m := javaVersionRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no version in java -version output %q", lastLines(out, 3))
	}
	major, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, fmt.Errorf("parsing java version %q: %w", m[0], err)
	}
	if major == 1 && m[2] != "" {
		return strconv.Atoi(m[2])
	}
	return major, nil
}
