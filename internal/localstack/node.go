package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/eventforge/eventforge/internal/filelock"
	"github.com/eventforge/eventforge/internal/pgbin"
)

// Node is one PostgreSQL server of a stack's replication pair — the
// stack's own cluster or a standby AddStandby made — apart from the role it
// has now. A planned switchover swaps the roles: the primary stops cleanly,
// the standby is promoted, and the old primary follows the new one
// (Follow); a switch back does the same the other way.
type Node struct {
	// Name is the node's application_name while it follows, and the name
	// of its physical slot on the primary it follows.
	Name string
	// Port is the node's port on 127.0.0.1.
	Port int
	// Endpoints are the node's DSNs.
	Endpoints Endpoints

	cfg   Config
	l     layout
	owner pgOwner
	dist  pgbin.Dist
	pw    string
}

// PrimaryNode returns the stack's own cluster (cfg.PGVersion) as a Node
// named name (lower-case letters, digits and underscores).
func PrimaryNode(ctx context.Context, cfg Config, name string, log *slog.Logger) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating local stack config: %w", err)
	}
	if !standbyNameRE.MatchString(name) {
		return nil, fmt.Errorf("node name %q: want lower-case letters, digits and underscores", name)
	}
	dist, err := pgbin.Ensure(ctx, cfg.PGVersion, "", log)
	if err != nil {
		return nil, fmt.Errorf("finding postgresql %d: %w", cfg.PGVersion, err)
	}
	owner, err := currentPGOwner()
	if err != nil {
		return nil, err
	}
	l := newLayoutFor(cfg.StateDir, cfg.PGVersion)
	pw, err := adminPassword(l)
	if err != nil {
		return nil, err
	}
	return &Node{Name: name, Port: cfg.PGPort, Endpoints: cfg.endpoints(pw), cfg: cfg, l: l, owner: owner, dist: dist, pw: pw}, nil
}

// Node returns the standby as a Node.
func (s *Standby) Node() *Node {
	return &Node{Name: s.Name, Port: s.Port, Endpoints: s.Endpoints, cfg: s.cfg, l: s.l, owner: s.owner, dist: s.dist, pw: s.pw}
}

// PID returns the node's postmaster pid, 0 when it does not run.
func (n *Node) PID() int {
	if pid := readPID(n.l.pgPIDFile); isPostmasterOf(pid, n.l) {
		return pid
	}
	return 0
}

// Stop stops the node with a fast shutdown: a primary first sends its
// standbys every WAL record, the shutdown checkpoint included, and waits
// until they flushed it, so a standby promoted next has every commit.
func (n *Node) Stop(ctx context.Context, log *slog.Logger) error {
	return stopPostgres(ctx, n.l, log)
}

// Promote promotes the node (pg_ctl promote, which waits until it has left
// recovery) and then waits until it accepts writes.
func (n *Node) Promote(ctx context.Context) error {
	cmd := n.owner.pgCommand(ctx, n.dist, n.l.pgDir, "pg_ctl", "-D", n.l.pgData, "-w",
		"-t", strconv.Itoa(int(pgStartTimeout.Seconds())), "promote")
	if out, err := cmd.CombinedOutput(); err != nil {
		return withLogs(fmt.Errorf("running pg_ctl promote: %w\n%s", err, lastLines(string(out), 10)), n.l.pgLog+"/postgresql.log")
	}
	// Assigning a transaction id is refused in recovery.
	if err := waitAdmin(ctx, n.Endpoints.AdminDSN, pgAnswerTimeout,
		`SELECT NOT pg_is_in_recovery() AND pg_current_xact_id() IS NOT NULL`); err != nil {
		return fmt.Errorf("waiting for the promoted node %s to accept writes: %w", n.Name, err)
	}
	return nil
}

// Follow makes the stopped node a streaming standby of primary, as a
// switchover does with the old primary once the standby is promoted: no
// pg_rewind is needed, because a node stopped cleanly wrote nothing its
// standby did not receive before the promotion forked the new timeline,
// which the node then follows (recovery_target_timeline 'latest'). On the
// primary it creates the node's physical slot and, with syncSlots
// (PostgreSQL 17+), names it in synchronized_standby_slots. The node loses
// its replication slots — a logical slot of its own would block the
// synchronisation of the primary's, which it receives again with syncSlots
// — gets a standby.signal and the recovery settings, starts, and Follow
// waits until it streams.
func (n *Node) Follow(ctx context.Context, primary *Node, syncSlots bool, log *slog.Logger) error {
	log = log.With("node", n.Name, "primary", primary.Name)
	unlock, err := filelock.Lock(ctx, newLayout(n.cfg.StateDir).lock, "state dir", log)
	if err != nil {
		return err
	}
	defer unlock()
	if pid := n.PID(); pid != 0 {
		return fmt.Errorf("node %s runs (pid %d): stop it before it follows %s", n.Name, pid, primary.Name)
	}
	begin := time.Now()
	if err := ExecOnce(ctx, primary.Endpoints.AdminDSN,
		`SELECT pg_create_physical_replication_slot($1, true) WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`,
		n.Name); err != nil {
		return fmt.Errorf("creating physical slot %s on %s: %w", n.Name, primary.Name, err)
	}
	sc := StandbyConfig{Name: n.Name, Port: n.Port, SyncSlots: syncSlots}
	if err := waitStandbySlotSetting(ctx, primary.Endpoints.AdminDSN, sc); err != nil {
		return err
	}
	if err := n.makeStandby(); err != nil {
		return err
	}
	conf, err := renderPGConfAt(n.Port, n.l, append(append([]string{}, n.cfg.PGSettings...), standbySettings(primary.Port, sc, n.pw)...))
	if err != nil {
		return err
	}
	if err := startServer(ctx, n.Port, n.l, n.owner, n.dist, conf, log); err != nil {
		return fmt.Errorf("starting node %s as a standby of %s: %w", n.Name, primary.Name, err)
	}
	if err := waitAdmin(ctx, primary.Endpoints.AdminDSN, standbyReadyTimeout,
		`SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, n.Name); err != nil {
		return withLogs(fmt.Errorf("waiting for node %s to stream from %s: %w", n.Name, primary.Name, err), n.l.pgLog+"/postgresql.log")
	}
	log.Info("node follows", "pg_port", n.Port, "primary_port", primary.Port, "sync_slots", syncSlots,
		"elapsed_ms", time.Since(begin).Milliseconds())
	return nil
}

// waitStandbySlotSetting names sc's slot in the primary's
// synchronized_standby_slots when sc.SyncSlots, and waits until it holds.
func waitStandbySlotSetting(ctx context.Context, adminDSN string, sc StandbyConfig) error {
	if !sc.SyncSlots {
		return nil
	}
	stmt := fmt.Sprintf(`ALTER SYSTEM SET synchronized_standby_slots = '%s'`, sc.Name)
	if err := ExecOnce(ctx, adminDSN, stmt); err != nil {
		return fmt.Errorf("naming slot %s in synchronized_standby_slots: %w", sc.Name, err)
	}
	if err := ExecOnce(ctx, adminDSN, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("reloading the primary's settings: %w", err)
	}
	return waitAdmin(ctx, adminDSN, standbyReadyTimeout, `SELECT current_setting('synchronized_standby_slots') = $1`, sc.Name)
}

// makeStandby empties the stopped node's pg_replslot and writes its
// standby.signal.
func (n *Node) makeStandby() error {
	dir := filepath.Join(n.l.pgData, "pg_replslot")
	slots, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	for _, e := range slots {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("removing slot %s of node %s: %w", e.Name(), n.Name, err)
		}
	}
	if err := os.Remove(filepath.Join(n.l.pgData, "postmaster.opts")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing postmaster.opts of node %s: %w", n.Name, err)
	}
	return n.owner.writeFile(filepath.Join(n.l.pgData, "standby.signal"), nil, 0o600)
}
