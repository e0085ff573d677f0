package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/filelock"
	"github.com/eventforge/eventforge/internal/pgbin"
)

// DefaultStandbyName is the standby's application_name and the name of its
// physical slot on the primary when StandbyConfig.Name is empty.
const DefaultStandbyName = "eventforge_standby"

// standbyReadyTimeout bounds the wait for a new standby to stream (and, when
// synchronous, to be the synchronous one).
const standbyReadyTimeout = 2 * time.Minute

var standbyNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,40}$`)

// StandbyConfig describes a streaming standby of a stack's PostgreSQL.
type StandbyConfig struct {
	// Name is the standby's application_name and its physical slot on the
	// primary: lower-case letters, digits and underscores. Default
	// DefaultStandbyName.
	Name string
	// Port is the standby's port on 127.0.0.1. Required.
	Port int
	// Synchronous sets the primary's synchronous_standby_names to the
	// standby once it streams, so a commit returns only after the standby
	// flushed it.
	Synchronous bool
	// SyncSlots (PostgreSQL 17+) turns on failover-slot synchronisation:
	// sync_replication_slots on the standby, synchronized_standby_slots
	// naming the standby's physical slot on the primary (no logical
	// walsender then sends a change the standby has not received).
	SyncSlots bool
	// Settings are extra postgresql.conf lines of the standby.
	Settings []string
}

// Standby is a running streaming standby made by AddStandby. Down of the
// stack's state dir stops it with the primary.
type Standby struct {
	// Name is the application_name and physical slot name.
	Name string
	// Port is the standby's port on 127.0.0.1.
	Port int
	// Endpoints are the standby's DSNs (KafkaBootstrap is the stack's).
	Endpoints Endpoints
	// DataDir is the standby's data directory.
	DataDir string

	cfg   Config
	l     layout
	owner pgOwner
	dist  pgbin.Dist
	pw    string
}

// AddStandby makes a streaming standby of cfg's running PostgreSQL without
// pg_basebackup: it creates the physical slot on the primary, stops the
// primary cleanly, copies its data dir to <state>/pg-standby-<name> (with an
// empty pg_replslot, a standby.signal, primary_conninfo with dbname= for
// slot sync, primary_slot_name and hot_standby_feedback=on), starts both,
// and waits until the standby streams. With sc.Synchronous or sc.SyncSlots
// it then sets the primary's side with ALTER SYSTEM (not copied to the
// standby, so a promoted standby waits for nobody) and waits until it holds.
// Clients of the primary lose their connections during the restart.
func AddStandby(ctx context.Context, cfg Config, sc StandbyConfig, log *slog.Logger) (*Standby, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating local stack config: %w", err)
	}
	if err := checkStandby(cfg, &sc); err != nil {
		return nil, err
	}
	primary := newLayoutFor(cfg.StateDir, cfg.PGVersion)
	sl := primary.withPGDir(filepath.Join(cfg.StateDir, "pg-standby-"+sc.Name))
	if sock := filepath.Join(sl.pgRun, ".s.PGSQL."+strconv.Itoa(sc.Port)); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("state dir %q is too long for a standby: the socket path %s exceeds %d bytes", cfg.StateDir, sock, maxSocketPath)
	}
	log = log.With("state_dir", cfg.StateDir, "standby", sc.Name)
	unlock, err := filelock.Lock(ctx, primary.lock, "state dir", log)
	if err != nil {
		return nil, err
	}
	defer unlock()

	dist, err := pgbin.Ensure(ctx, cfg.PGVersion, "", log)
	if err != nil {
		return nil, fmt.Errorf("finding postgresql %d: %w", cfg.PGVersion, err)
	}
	owner, err := currentPGOwner()
	if err != nil {
		return nil, err
	}
	if !isPostmasterOf(readPID(primary.pgPIDFile), primary) {
		return nil, fmt.Errorf("adding a standby: the primary of %s does not run", primary.pgData)
	}
	if isPostmasterOf(readPID(sl.pgPIDFile), sl) {
		return nil, fmt.Errorf("adding standby %s: it already runs (pid %d)", sc.Name, readPID(sl.pgPIDFile))
	}
	if err := portFree(sc.Port); err != nil {
		return nil, fmt.Errorf("standby port %d: %w", sc.Port, err)
	}
	pw, err := adminPassword(primary)
	if err != nil {
		return nil, err
	}
	ep := cfg.endpoints(pw)
	begin := time.Now()

	// Reserve WAL from now on: the standby starts from the shutdown
	// checkpoint below and connects a moment after the primary restarts.
	if err := ExecOnce(ctx, ep.AdminDSN,
		`SELECT pg_create_physical_replication_slot($1, true) WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`,
		sc.Name); err != nil {
		return nil, fmt.Errorf("creating physical slot %s on the primary: %w", sc.Name, err)
	}
	if err := copyPrimary(ctx, cfg, primary, sl, owner, dist, log); err != nil {
		return nil, err
	}
	conf, err := renderPGConfAt(sc.Port, sl, append(append([]string{}, cfg.PGSettings...), standbySettings(cfg.PGPort, sc, pw)...))
	if err != nil {
		return nil, err
	}
	if err := startServer(ctx, sc.Port, sl, owner, dist, conf, log); err != nil {
		return nil, fmt.Errorf("starting standby %s: %w", sc.Name, err)
	}
	s := &Standby{
		Name:      sc.Name,
		Port:      sc.Port,
		Endpoints: Config{PGPort: sc.Port, KafkaPort: cfg.KafkaPort, PGVersion: cfg.PGVersion}.endpoints(pw),
		DataDir:   sl.pgData,
		cfg:       cfg,
		l:         sl,
		owner:     owner,
		dist:      dist,
		pw:        pw,
	}
	if cfg.PostgresOnly {
		s.Endpoints.KafkaBootstrap = ""
	}
	if err := waitStandby(ctx, ep.AdminDSN, sc, sl); err != nil {
		return nil, err
	}
	log.Info("standby streaming", "pg_port", sc.Port, "pid", readPID(sl.pgPIDFile), "synchronous", sc.Synchronous,
		"sync_slots", sc.SyncSlots, "data_dir", sl.pgData, "elapsed_ms", time.Since(begin).Milliseconds())
	return s, nil
}

// copyPrimary stops the primary, copies its data directory to the
// standby's and starts the primary again, whatever happened to the copy.
func copyPrimary(ctx context.Context, cfg Config, primary, sl layout, owner pgOwner, dist pgbin.Dist, log *slog.Logger) error {
	if err := stopPostgres(ctx, primary, log); err != nil {
		return fmt.Errorf("stopping the primary to copy it: %w", err)
	}
	copyErr := copyDataDir(ctx, primary, sl, owner)
	// The primary comes back whatever happened to the copy.
	if err := startPostgres(ctx, cfg, primary, owner, dist, log); err != nil {
		return errors.Join(copyErr, fmt.Errorf("restarting the primary: %w", err))
	}
	if copyErr != nil {
		return copyErr
	}
	return nil
}

// checkStandby validates sc against the primary's cfg, defaulting its name.
func checkStandby(cfg Config, sc *StandbyConfig) error {
	if sc.Name == "" {
		sc.Name = DefaultStandbyName
	}
	if !standbyNameRE.MatchString(sc.Name) {
		return fmt.Errorf("standby name %q: want lower-case letters, digits and underscores", sc.Name)
	}
	if sc.Port < 1 || sc.Port > 65535 || sc.Port == cfg.PGPort {
		return fmt.Errorf("standby port %d: want a free port other than the primary's %d", sc.Port, cfg.PGPort)
	}
	if sc.SyncSlots && cfg.PGVersion < 17 {
		return fmt.Errorf("failover slot synchronisation needs PostgreSQL 17 or later, the stack runs %d", cfg.PGVersion)
	}
	return nil
}

// waitStandby waits until the standby sc streams from the primary at
// adminDSN, then makes it synchronous and names its slot in
// synchronized_standby_slots when sc asks for it, and waits until the
// primary applied both.
func waitStandby(ctx context.Context, adminDSN string, sc StandbyConfig, sl layout) error {
	if err := waitAdmin(ctx, adminDSN, standbyReadyTimeout,
		`SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, sc.Name); err != nil {
		return withLogs(fmt.Errorf("waiting for standby %s to stream: %w", sc.Name, err), sl.pgLog+"/postgresql.log")
	}
	var sets []string
	if sc.Synchronous {
		sets = append(sets, fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '%s'`, sc.Name))
	}
	if sc.SyncSlots {
		sets = append(sets, fmt.Sprintf(`ALTER SYSTEM SET synchronized_standby_slots = '%s'`, sc.Name))
	}
	for _, stmt := range sets {
		if err := ExecOnce(ctx, adminDSN, stmt); err != nil {
			return fmt.Errorf("configuring the primary for standby %s (%s): %w", sc.Name, stmt, err)
		}
	}
	if len(sets) > 0 {
		if err := ExecOnce(ctx, adminDSN, `SELECT pg_reload_conf()`); err != nil {
			return fmt.Errorf("reloading the primary's settings: %w", err)
		}
	}
	if sc.Synchronous {
		if err := waitAdmin(ctx, adminDSN, standbyReadyTimeout,
			`SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = $1 AND sync_state = 'sync'`, sc.Name); err != nil {
			return fmt.Errorf("waiting for standby %s to be synchronous: %w", sc.Name, err)
		}
	}
	if sc.SyncSlots {
		if err := waitAdmin(ctx, adminDSN, standbyReadyTimeout,
			`SELECT current_setting('synchronized_standby_slots') = $1`, sc.Name); err != nil {
			return fmt.Errorf("waiting for the primary to name slot %s in synchronized_standby_slots: %w", sc.Name, err)
		}
	}
	return nil
}

// standbySettings are the recovery settings of standby sc of the primary on
// primaryPort.
func standbySettings(primaryPort int, sc StandbyConfig, adminPassword string) []string {
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s application_name=%s dbname=postgres",
		primaryPort, adminUser, adminPassword, sc.Name)
	out := []string{
		"primary_conninfo = '" + conninfo + "'",
		"primary_slot_name = '" + sc.Name + "'",
		"hot_standby = on",
		"hot_standby_feedback = on",
	}
	if sc.SyncSlots {
		out = append(out, "sync_replication_slots = on")
	}
	return append(out, sc.Settings...)
}

// copyDataDir copies the stopped primary's data dir into the standby's
// directory (replacing an old one) and turns the copy into a standby: no
// replication slots (a copied slot blocks slot sync), no settings the
// primary got by ALTER SYSTEM, a standby.signal.
func copyDataDir(ctx context.Context, primary, sl layout, owner pgOwner) error {
	if err := os.RemoveAll(sl.pgDir); err != nil {
		return fmt.Errorf("removing an old standby dir: %w", err)
	}
	for _, d := range []string{sl.pgDir, sl.pgRun, sl.pgLog} {
		if err := owner.mkdir(d, 0o700); err != nil {
			return err
		}
	}
	// cp -a keeps the owner and the 0700 modes PostgreSQL insists on.
	if out, err := exec.CommandContext(ctx, "cp", "-a", primary.pgData, sl.pgData).CombinedOutput(); err != nil {
		return fmt.Errorf("copying %s to %s: %w\n%s", primary.pgData, sl.pgData, err, lastLines(string(out), 10))
	}
	slots, err := os.ReadDir(filepath.Join(sl.pgData, "pg_replslot"))
	if err != nil {
		return fmt.Errorf("reading the copy's pg_replslot: %w", err)
	}
	for _, e := range slots {
		if err := os.RemoveAll(filepath.Join(sl.pgData, "pg_replslot", e.Name())); err != nil {
			return fmt.Errorf("emptying the copy's pg_replslot: %w", err)
		}
	}
	for _, f := range []string{"postmaster.pid", "postmaster.opts"} {
		if err := os.Remove(filepath.Join(sl.pgData, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the copy's %s: %w", f, err)
		}
	}
	auto := []byte("# Do not edit this file manually!\n# It will be overwritten by the ALTER SYSTEM command.\n")
	if err := owner.writeFile(filepath.Join(sl.pgData, "postgresql.auto.conf"), auto, 0o600); err != nil {
		return err
	}
	return owner.writeFile(filepath.Join(sl.pgData, "standby.signal"), nil, 0o600)
}

// PID returns the standby's postmaster pid, 0 when it does not run.
func (s *Standby) PID() int {
	if pid := readPID(s.l.pgPIDFile); isPostmasterOf(pid, s.l) {
		return pid
	}
	return 0
}

// Promote promotes the standby (pg_ctl promote, which waits until it has
// left recovery) and then waits until it accepts writes.
func (s *Standby) Promote(ctx context.Context) error { return s.Node().Promote(ctx) }

// Stop stops the standby with a fast shutdown.
func (s *Standby) Stop(ctx context.Context, log *slog.Logger) error {
	return stopPostgres(ctx, s.l, log)
}

// KillPostgres SIGKILLs the postmaster of cfg's PostgreSQL (its configured
// version) and every process of it, and waits until they are gone, as a
// crash of the machine would leave it (minus the page cache). It returns
// the killed pid.
func KillPostgres(ctx context.Context, cfg Config) (int, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return 0, fmt.Errorf("validating local stack config: %w", err)
	}
	return killPostgres(ctx, newLayoutFor(cfg.StateDir, cfg.PGVersion))
}

// ExecOnce runs one statement on a new connection to dsn (at most 30 s).
func ExecOnce(ctx context.Context, dsn, sql string, args ...any) error {
	return withConn(ctx, dsn, 30*time.Second, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	})
}

// waitAdmin polls a query returning one boolean on dsn until it is true or
// timeout passes.
func waitAdmin(ctx context.Context, dsn string, timeout time.Duration, sql string, args ...any) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := queryBool(ctx, dsn, sql, args...)
		if err == nil && ok {
			return nil
		}
		last = err
		if last == nil {
			last = errors.New("condition is false")
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: not true within %s: %w", strings.Join(strings.Fields(sql), " "), timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func queryBool(ctx context.Context, dsn, sql string, args ...any) (bool, error) {
	var ok bool
	err := withConn(ctx, dsn, 10*time.Second, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, sql, args...).Scan(&ok)
	})
	return ok, err
}

// Restart stops the standby — with an immediate shutdown (SIGQUIT: no
// restartpoint, crash recovery at the start) when immediate, else a fast
// one — starts it again with its settings, and waits until it streams from
// the primary at primaryAdminDSN again.
func (s *Standby) Restart(ctx context.Context, primaryAdminDSN string, immediate bool, log *slog.Logger) error {
	pid := s.PID()
	switch {
	case pid == 0:
	case immediate:
		if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stopping standby %s (pid %d): %w", s.Name, pid, err)
		}
		waitGone(ctx, pid, time.Minute)
	default:
		if err := stopPostgres(ctx, s.l, log); err != nil {
			return err
		}
	}
	conf, err := os.ReadFile(filepath.Join(s.l.pgData, s.l.pgConfName))
	if err != nil {
		return fmt.Errorf("reading the settings of standby %s: %w", s.Name, err)
	}
	if err := startServer(ctx, s.Port, s.l, s.owner, s.dist, conf, log); err != nil {
		return fmt.Errorf("starting standby %s: %w", s.Name, err)
	}
	if err := waitAdmin(ctx, primaryAdminDSN, standbyReadyTimeout,
		`SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, s.Name); err != nil {
		return withLogs(fmt.Errorf("waiting for standby %s to stream again: %w", s.Name, err), s.l.pgLog+"/postgresql.log")
	}
	return nil
}
