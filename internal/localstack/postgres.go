package localstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/deploy/local"
	"github.com/eventforge/eventforge/internal/pgbin"
)

const (
	// pgStartTimeout bounds pg_ctl start and stop.
	pgStartTimeout = 120 * time.Second
	// pgStartAttempts is how often pg_ctl start is tried.
	pgStartAttempts = 3
	// pgAnswerTimeout bounds the wait for a running server to accept
	// connections.
	pgAnswerTimeout = 30 * time.Second
	// pgStopTimeout bounds a fast shutdown.
	pgStopTimeout = 120 * time.Second
)

// upPostgres creates the cluster on first use, starts it unless it already
// runs, and ensures the application role and database exist. It reports
// whether it started the server.
func upPostgres(ctx context.Context, cfg Config, l layout, dist pgbin.Dist, log *slog.Logger) (bool, error) {
	owner, err := currentPGOwner()
	if err != nil {
		return false, err
	}
	for _, d := range []string{l.pgDir, l.pgRun, l.pgLog} {
		if err := owner.mkdir(d, 0o700); err != nil {
			return false, err
		}
	}
	if d := untraversable(l.pgDir, owner.uid, owner.gid, os.Stat); d != "" {
		return false, fmt.Errorf("user %s cannot traverse %s to reach %s: set %s to a directory under a world-traversable parent such as /var/tmp", owner.name, d, l.pgDir, StateDirEnv)
	}
	password, err := adminPassword(l)
	if err != nil {
		return false, err
	}
	if !fileExists(l.pgReady) {
		if err := initCluster(ctx, l, owner, dist, password, cfg.PGClientNetworks, log); err != nil {
			return false, fmt.Errorf("creating postgres cluster in %s: %w", l.pgData, err)
		}
	}
	if err := checkDataVersion(l, cfg.PGVersion); err != nil {
		return false, err
	}
	ep := cfg.endpoints(password)

	started := false
	if pid := readPID(l.pgPIDFile); alive(pid) {
		// Ours runs: it may still be starting or recovering.
		if err := waitPG(ctx, ep.AdminDSN, pid, pgAnswerTimeout); err != nil {
			err = fmt.Errorf("postgres of this state dir runs (pid %d) but does not answer on port %d (if the port changed, run Down first): %w", pid, cfg.PGPort, err)
			return false, withLogs(err, l.pgLog+"/postgresql.log")
		}
		log.Info("postgres already running", "pid", pid, "pg_port", cfg.PGPort)
	} else {
		if err := startPostgres(ctx, cfg, l, owner, dist, log); err != nil {
			return false, err
		}
		started = true
	}
	if err := ensureAppRole(ctx, ep.AdminDSN); err != nil {
		return started, err
	}
	return started, nil
}

// adminPassword returns the superuser password, creating it before the
// cluster exists.
func adminPassword(l layout) (string, error) {
	b, err := os.ReadFile(l.adminPassword)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading %s: %w", l.adminPassword, err)
	}
	if fileExists(l.pgReady) {
		return "", fmt.Errorf("cluster in %s exists but %s is missing: remove %s to start over", l.pgData, l.adminPassword, l.root)
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generating admin password: %w", err)
	}
	pw := hex.EncodeToString(raw)
	if err := os.WriteFile(l.adminPassword, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", l.adminPassword, err)
	}
	return pw, nil
}

// initCluster runs initdb (with the extra arguments) and installs the
// stack's pg_hba.conf (admitting clients of networks too, beside loopback)
// and the include of its settings. A half-made data dir from an interrupted
// run is removed first.
func initCluster(ctx context.Context, l layout, owner pgOwner, dist pgbin.Dist, password string, networks []string, log *slog.Logger, extra ...string) error {
	begin := time.Now()
	if err := os.RemoveAll(l.pgData); err != nil {
		return fmt.Errorf("removing incomplete data dir: %w", err)
	}
	if err := owner.writeFile(l.pgPwFile, []byte(password+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(l.pgPwFile)
	cmd := owner.pgCommand(ctx, dist, l.pgDir, "initdb", append([]string{
		"-D", l.pgData,
		"-U", adminUser,
		"--pwfile=" + l.pgPwFile,
		"--auth-host=scram-sha-256",
		"--auth-local=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-instructions",
	}, extra...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("running initdb: %w\n%s", err, lastLines(string(out), 20))
	}
	hba, err := local.Files.ReadFile("pg_hba.conf")
	if err != nil {
		return fmt.Errorf("reading embedded pg_hba.conf: %w", err)
	}
	for _, n := range networks {
		hba = fmt.Appendf(hba, "host    all          all   %s  scram-sha-256\nhost    replication  all   %s  scram-sha-256\n", n, n)
	}
	if err := owner.writeFile(l.pgHBA, hba, 0o600); err != nil {
		return err
	}
	conf := l.pgData + "/postgresql.conf"
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", conf, err)
	}
	_, werr := fmt.Fprintf(f, "\n# Local stack settings (deploy/local/postgresql.conf).\ninclude_if_exists = '%s'\n", l.pgConfName)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("appending to %s: %w", conf, err)
	}
	if err := os.WriteFile(l.pgReady, nil, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", l.pgReady, err)
	}
	log.Info("postgres cluster created", "data_dir", l.pgData, "pg_version", dist.Major, "source", dist.Source,
		"elapsed_ms", time.Since(begin).Milliseconds())
	return nil
}

// checkDataVersion reports an error when the data dir of l was made by
// another major version than want.
func checkDataVersion(l layout, want int) error {
	b, err := os.ReadFile(l.pgVersionFn)
	if err != nil {
		return fmt.Errorf("reading the data dir's version: %w", err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(want) {
		return fmt.Errorf("data dir %s belongs to PostgreSQL %s, not %d: remove %s to start over", l.pgData, got, want, l.pgDir)
	}
	return nil
}

// renderPGConf renders deploy/local/postgresql.conf for cfg, followed by
// cfg.PGSettings.
func renderPGConf(cfg Config, l layout) ([]byte, error) {
	return renderPGConfAt(cfg.PGPort, l, cfg.PGSettings)
}

// renderPGConfAt renders deploy/local/postgresql.conf for a server of l on
// port, followed by the extra lines.
func renderPGConfAt(port int, l layout, extra []string) ([]byte, error) {
	conf, err := render("postgresql.conf", map[string]string{
		"Port":      strconv.Itoa(port),
		"SocketDir": l.pgRun,
		"LogDir":    l.pgLog,
	})
	if err != nil {
		return nil, err
	}
	if len(extra) > 0 {
		conf = append(conf, "\n# Settings of this stack (Config.PGSettings) or server.\n"...)
		for _, line := range extra {
			conf = append(conf, line+"\n"...)
		}
	}
	return conf, nil
}

// pgPortFree reports an error when the PostgreSQL port is taken.
func pgPortFree(cfg Config, l layout) error {
	if err := portFree(cfg.PGPort); err != nil {
		return fmt.Errorf("port %d on 127.0.0.1 is in use by a process that is not this stack's server (state dir %s): %w", cfg.PGPort, l.root, err)
	}
	return nil
}

// startPostgres writes the current settings and starts the server, waiting
// until it accepts connections.
func startPostgres(ctx context.Context, cfg Config, l layout, owner pgOwner, dist pgbin.Dist, log *slog.Logger) error {
	if err := pgPortFree(cfg, l); err != nil {
		return err
	}
	conf, err := renderPGConf(cfg, l)
	if err != nil {
		return err
	}
	return startServer(ctx, cfg.PGPort, l, owner, dist, conf, log)
}

// startServer writes conf as the data dir's included settings and starts
// the server of l with pg_ctl, waiting until it accepts connections (a hot
// standby: until it reached a consistent state).
func startServer(ctx context.Context, port int, l layout, owner pgOwner, dist pgbin.Dist, conf []byte, log *slog.Logger) error {
	if err := owner.writeFile(l.pgData+"/"+l.pgConfName, conf, 0o600); err != nil {
		return err
	}
	// A postmaster killed a moment ago may linger as a zombie, which
	// PostgreSQL takes for a running server, and its children may still hold
	// the shared memory: wait for the pid to vanish, then retry a few times.
	if pid := readPID(l.pgPIDFile); pid != 0 {
		waitGone(ctx, pid, 10*time.Second)
	}
	begin := time.Now()
	for attempt := 1; ; attempt++ {
		cmd := owner.pgCommand(ctx, dist, l.pgDir, "pg_ctl",
			"-D", l.pgData,
			"-l", l.pgCtlLog,
			"-w", "-t", strconv.Itoa(int(pgStartTimeout.Seconds())),
			"start",
		)
		out, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		if attempt < pgStartAttempts && ctx.Err() == nil {
			log.Warn("postgres did not start, retrying", "attempt", attempt, "error", err.Error(), "output", lastLines(string(out), 3))
			time.Sleep(time.Second)
			continue
		}
		err = fmt.Errorf("running pg_ctl start: %w\n%s", err, lastLines(string(out), 10))
		return withLogs(err, l.pgCtlLog, l.pgLog+"/postgresql.log")
	}
	log.Info("postgres started", "pid", readPID(l.pgPIDFile), "pg_port", port, "pg_version", dist.Major,
		"data_dir", l.pgData, "log_file", l.pgLog+"/postgresql.log", "elapsed_ms", time.Since(begin).Milliseconds())
	return nil
}

// stopPostgres stops the server of l with a fast shutdown (SIGINT to the
// postmaster, as pg_ctl stop -m fast sends, so it needs no programs of the
// server's version) and waits until the postmaster and its children are
// gone; it does nothing when the server is not running.
func stopPostgres(ctx context.Context, l layout, log *slog.Logger) error {
	pid := readPID(l.pgPIDFile)
	if !isPostmasterOf(pid, l) {
		return nil // not running, or the pid was reused by another process
	}
	begin := time.Now()
	procs := append(descendants(pid), pid)
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping postgres (pid %d): %w", pid, err)
	}
	// Stopped means no process left: the postmaster waits for its backends
	// and its logger follows it out.
	for _, p := range procs {
		timeout := 10 * time.Second
		if p == pid {
			timeout = pgStopTimeout
		}
		if !waitGone(ctx, p, timeout) {
			return fmt.Errorf("stopping postgres: pid %d (%s) still exists %s after SIGINT", p, cmdline(p), timeout)
		}
	}
	log.Info("postgres stopped", "pid", pid, "data_dir", l.pgData, "elapsed_ms", time.Since(begin).Milliseconds())
	return nil
}

// isPostmasterOf reports whether pid is a live postmaster of l's data dir.
func isPostmasterOf(pid int, l layout) bool {
	if !alive(pid) {
		return false
	}
	cl := cmdline(pid)
	return strings.HasSuffix(cl, " -D "+l.pgData) || strings.Contains(cl, " -D "+l.pgData+" ")
}

// killPostgres SIGKILLs the postmaster of l and waits until it and every
// child it had are gone (the children exit when they notice their
// postmaster died). The data dir is left as a crash leaves it.
func killPostgres(ctx context.Context, l layout) (int, error) {
	pid := readPID(l.pgPIDFile)
	if !isPostmasterOf(pid, l) {
		return 0, fmt.Errorf("killing postgres of %s: it does not run", l.pgData)
	}
	procs := append(descendants(pid), pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return pid, fmt.Errorf("killing postgres (pid %d): %w", pid, err)
	}
	// Like the loss of the host: every process of the server dies with it.
	// A backend left alone after its postmaster's death can run on for
	// ever — one creating a logical slot waits in a sleep loop for WAL that
	// nobody writes any more.
	for _, p := range procs[:len(procs)-1] {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	for _, p := range procs {
		if !waitGone(ctx, p, 30*time.Second) {
			return pid, fmt.Errorf("killing postgres: pid %d (%s) still exists 30 s after its postmaster was killed", p, cmdline(p))
		}
	}
	return pid, nil
}

// pingPG connects to dsn and pings, within a short bound.
func pingPG(ctx context.Context, dsn string) error {
	return withConn(ctx, dsn, 5*time.Second, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.Ping(ctx)
	})
}

// withConn runs f on a new connection to dsn, connecting and f's work
// together bounded by timeout, and closes the connection.
func withConn(ctx context.Context, dsn string, timeout time.Duration, f func(ctx context.Context, conn *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(ctx, conn)
}

// waitPG pings dsn until it answers, the postmaster pid exits or timeout
// passes.
func waitPG(ctx context.Context, dsn string, pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := pingPG(ctx, dsn)
		if err == nil {
			return nil
		}
		if !alive(pid) {
			return fmt.Errorf("postmaster exited: %w", err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ensureAppRole makes sure the application role has its attributes and
// password and owns the application database.
func ensureAppRole(ctx context.Context, adminDSN string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return fmt.Errorf("connecting as %s: %w", adminUser, err)
	}
	defer conn.Close(context.Background())

	role := pgx.Identifier{appUser}.Sanitize()
	attrs := fmt.Sprintf("LOGIN REPLICATION CREATEDB PASSWORD '%s'", appPassword)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", appUser).Scan(&exists); err != nil {
		return fmt.Errorf("looking up role %s: %w", appUser, err)
	}
	stmt := "ALTER ROLE " + role + " " + attrs
	if !exists {
		stmt = "CREATE ROLE " + role + " " + attrs
	}
	if _, err := conn.Exec(ctx, stmt); err != nil && !isPGCode(err, "42710") {
		return fmt.Errorf("ensuring role %s: %w", appUser, err)
	}

	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", appDatabase).Scan(&exists); err != nil {
		return fmt.Errorf("looking up database %s: %w", appDatabase, err)
	}
	if !exists {
		stmt := "CREATE DATABASE " + pgx.Identifier{appDatabase}.Sanitize() + " OWNER " + role
		if _, err := conn.Exec(ctx, stmt); err != nil && !isPGCode(err, "42P04") {
			return fmt.Errorf("creating database %s: %w", appDatabase, err)
		}
	}
	return nil
}

// isPGCode reports whether err is a PostgreSQL error with the SQLSTATE code.
func isPGCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}
