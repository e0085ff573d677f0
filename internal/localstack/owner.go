package localstack

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/eventforge/eventforge/internal/pgbin"
)

// pgOwner is the operating-system user that owns the PostgreSQL data dir and
// runs its programs. PostgreSQL refuses to run as root, so a root process
// uses the postgres system user through runuser(1).
type pgOwner struct {
	name     string
	uid, gid int
	viaRun   bool // run programs through runuser -u name --
}

// currentPGOwner picks the user for this process.
func currentPGOwner() (pgOwner, error) {
	if os.Geteuid() != 0 {
		return pgOwner{name: strconv.Itoa(os.Geteuid()), uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return pgOwner{}, fmt.Errorf("looking up user postgres (PostgreSQL does not run as root; the postgresql-15 package creates this user): %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return pgOwner{}, fmt.Errorf("parsing uid of postgres: %w", err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return pgOwner{}, fmt.Errorf("parsing gid of postgres: %w", err)
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return pgOwner{}, fmt.Errorf("finding runuser to run PostgreSQL as user postgres: %w", err)
	}
	return pgOwner{name: "postgres", uid: uid, gid: gid, viaRun: true}, nil
}

// command builds a command that runs as the owner in dir.
func (o pgOwner) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if o.viaRun {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", o.name, "--", name}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, name, args...)
	}
	cmd.Dir = dir
	return cmd
}

// pgCommand builds a command that runs the PostgreSQL program prog of d as
// the owner in dir, with the libraries d needs.
func (o pgOwner) pgCommand(ctx context.Context, d pgbin.Dist, dir, prog string, args ...string) *exec.Cmd {
	cmd := o.command(ctx, dir, d.Path(prog), args...)
	cmd.Env = d.Env()
	return cmd
}

// mkdir creates dir (and parents) and hands dir itself to the owner.
func (o pgOwner) mkdir(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return o.chown(dir)
}

// writeFile writes a file owned by the owner.
func (o pgOwner) writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return o.chown(path)
}

func (o pgOwner) chown(path string) error {
	if !o.viaRun {
		return nil
	}
	if err := os.Chown(path, o.uid, o.gid); err != nil {
		return fmt.Errorf("handing %s to user %s: %w", path, o.name, err)
	}
	return nil
}

// untraversable returns the first ancestor of path (path excluded) that a
// process with uid and gid cannot search, judged by its permission bits, or
// "" when every ancestor is searchable. uid 0 searches everything.
func untraversable(path string, uid, gid int, stat func(string) (fs.FileInfo, error)) string {
	if uid == 0 {
		return ""
	}
	for d := filepath.Dir(filepath.Clean(path)); ; d = filepath.Dir(d) {
		fi, err := stat(d)
		if err != nil {
			return d
		}
		mode := fi.Mode().Perm()
		ouid, ogid := -1, -1
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ouid, ogid = int(st.Uid), int(st.Gid)
		}
		var ok bool
		switch {
		case ouid == uid:
			ok = mode&0o100 != 0
		case ogid == gid:
			ok = mode&0o010 != 0
		default:
			ok = mode&0o001 != 0
		}
		if !ok {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}
