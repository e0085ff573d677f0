package localstack

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
)

// fakeHost is a machine whose programs and packages are a map.
type fakeHost struct {
	euid     int
	apt      bool
	files    map[string]bool // paths that exist
	paths    map[string]bool // programs on PATH
	java     int             // major version of the java on PATH
	provides map[string]func(*fakeHost)
	ran      []string
	failRun  string // command prefix that fails
}

func (f *fakeHost) host() host {
	return host{
		euid:   func() int { return f.euid },
		exists: func(p string) bool { return f.files[p] },
		lookPath: func(file string) (string, error) {
			if file == "apt-get" && f.apt {
				return "/usr/bin/apt-get", nil
			}
			if f.paths[file] {
				return "/usr/bin/" + file, nil
			}
			return "", errors.New("not found")
		},
		javaMajor: func(context.Context, string) (int, error) { return f.java, nil },
		run: func(_ context.Context, name string, args ...string) error {
			cmd := name + " " + strings.Join(args, " ")
			f.ran = append(f.ran, cmd)
			if f.failRun != "" && strings.HasPrefix(cmd, f.failRun) {
				return errors.New("exit status 100")
			}
			if len(args) > 0 && args[0] == "install" {
				for _, pkg := range args[1:] {
					if p := f.provides[pkg]; p != nil {
						p(f)
					}
				}
			}
			return nil
		},
	}
}

// debian returns a host where apt-get installs what the packages provide.
func debian(euid int) *fakeHost {
	return &fakeHost{
		euid:  euid,
		apt:   true,
		files: map[string]bool{},
		paths: map[string]bool{},
		provides: map[string]func(*fakeHost){
			pkgPostgres: func(f *fakeHost) { f.files[pgBin+"/initdb"], f.files[pgBin+"/pg_ctl"] = true, true },
			pkgJava:     func(f *fakeHost) { f.paths["java"], f.java = true, 17 },
			pkgMaven:    func(f *fakeHost) { f.paths["mvn"] = true },
		},
	}
}

func complete(f *fakeHost) *fakeHost {
	for _, p := range f.provides {
		p(f)
	}
	return f
}

func TestEnsurePrerequisites(t *testing.T) {
	tests := []struct {
		name    string
		host    func() *fakeHost
		wantRan []string
		wantErr string
	}{
		{
			name: "all present",
			host: func() *fakeHost { return complete(debian(0)) },
		},
		{
			name: "root installs what is missing",
			host: func() *fakeHost { return debian(0) },
			wantRan: []string{
				"apt-get update",
				"apt-get install -y --no-install-recommends postgresql-15 default-jre-headless maven",
			},
		},
		{
			name: "root installs only maven",
			host: func() *fakeHost {
				f := complete(debian(0))
				f.paths["mvn"] = false
				return f
			},
			wantRan: []string{"apt-get update", "apt-get install -y --no-install-recommends maven"},
		},
		{
			name: "old java counts as missing",
			host: func() *fakeHost {
				f := complete(debian(0))
				f.java = 11
				return f
			},
			wantRan: []string{"apt-get update", "apt-get install -y --no-install-recommends default-jre-headless"},
		},
		{
			name: "default jre still too old names openjdk-17",
			host: func() *fakeHost {
				f := complete(debian(0))
				f.java = 11
				f.provides[pkgJava] = func(*fakeHost) {}
				return f
			},
			wantRan: []string{"apt-get update", "apt-get install -y --no-install-recommends default-jre-headless"},
			wantErr: "run `apt-get install -y openjdk-17-jre-headless`",
		},
		{
			name: "non-root gets the command",
			host: func() *fakeHost {
				f := complete(debian(1000))
				f.files[pgBin+"/initdb"] = false
				return f
			},
			wantErr: "run `sudo apt-get update && sudo apt-get install -y postgresql-15`",
		},
		{
			name: "no apt-get",
			host: func() *fakeHost {
				f := complete(debian(0))
				f.apt = false
				f.paths["java"] = false
				return f
			},
			wantErr: "Debian packages default-jre-headless",
		},
		{
			name: "apt-get update fails",
			host: func() *fakeHost {
				f := debian(0)
				f.failRun = "apt-get update"
				return f
			},
			wantRan: []string{"apt-get update"},
			wantErr: "updating package lists",
		},
		{
			name: "apt-get install fails",
			host: func() *fakeHost {
				f := debian(0)
				f.failRun = "apt-get install"
				return f
			},
			wantRan: []string{"apt-get update", "apt-get install -y --no-install-recommends postgresql-15 default-jre-headless maven"},
			wantErr: "installing postgresql-15 default-jre-headless maven",
		},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.host()
			got, err := ensurePrerequisites(context.Background(), f.host(), log)
			if !reflect.DeepEqual(f.ran, tt.wantRan) {
				t.Errorf("ran %q, want %q", f.ran, tt.wantRan)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("error = %v", err)
			}
			if got.java != "/usr/bin/java" || got.mvn != "/usr/bin/mvn" {
				t.Errorf("tools = %+v", got)
			}
		})
	}
}

func TestParseJavaMajor(t *testing.T) {
	tests := []struct {
		out     string
		want    int
		wantErr bool
	}{
		{`openjdk version "17.0.15" 2025-04-15` + "\nOpenJDK Runtime Environment", 17, false},
		{`java version "1.8.0_402"`, 8, false},
		{`openjdk version "21" 2023-09-19`, 21, false},
		{`openjdk version "22-ea" 2024-03-19`, 22, false},
		{`Picked up JAVA_TOOL_OPTIONS: -Xmx1g` + "\n" + `openjdk version "11.0.22" 2024-01-16`, 11, false},
		{"no java here", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.out, func(t *testing.T) {
			got, err := parseJavaMajor(tt.out)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseJavaMajor = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
