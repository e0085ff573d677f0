package leader

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
)

// Decoding on a standby (docs/cdc.md, "Decoding on a standby").
//
// With a replication URL the slot lives on a physical standby of the
// primary (PostgreSQL 16+): the replication connection, the slot's reads,
// its creation with an exported snapshot, its drop, and the snapshot
// transaction a gap recovery republishes from all go there — an exported
// snapshot can be imported only on the server that exported it, and there
// it sees exactly the commits the new slot does not stream. Everything that
// writes stays on the primary (the leadership lock, heartbeats, the
// checkpoint and its confirm limit, dead letters, pruning); positions are
// comparable across the two because a standby replays the primary's WAL at
// the primary's LSNs, and transaction IDs are the primary's.

// serverIdentity is what tells servers apart: the cluster's system
// identifier (a standby shares its primary's), the database, whether it is
// in recovery, its version, and when its postmaster started.
type serverIdentity struct {
	system     string
	database   string
	recovery   bool
	version    int
	started    time.Time
	hsFeedback string
}

func readIdentity(ctx context.Context, c *control.Conn) (serverIdentity, error) {
	var id serverIdentity
	err := c.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT (SELECT system_identifier::text FROM pg_control_system()), current_database(),
			pg_is_in_recovery(), current_setting('server_version_num')::int, pg_postmaster_start_time(),
			current_setting('hot_standby_feedback')`).
			Scan(&id.system, &id.database, &id.recovery, &id.version, &id.started, &id.hsFeedback)
	})
	return id, err
}

// openSlots returns the connection to the server that holds the slot: ctl
// itself without a replication URL, else a connection to the replication
// server once it is checked (checkReplicationServer).
func (r *relay) openSlots(ctx context.Context, ctl *control.Conn) (*control.Conn, error) {
	if r.cfg.ReplicationURL == "" {
		return ctl, nil
	}
	slots, err := control.OpenSlotConn(ctx, r.cfg.ReplicationURL)
	if err != nil {
		return nil, err
	}
	if err := r.checkReplicationServer(ctx, ctl, slots); err != nil {
		slots.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return slots, nil
}

// checkReplicationServer refuses a replication server the relay cannot
// decode on safely: another cluster or database than the primary's (its
// positions and transaction IDs would mean nothing to the checkpoint), a
// standby older than 16 (no logical decoding there), and a server out of
// recovery that is not the primary itself (a promoted standby while the
// control connection still reaches the old primary). It warns about what
// costs a gap recovery: hot_standby_feedback off, and a slot of the same
// name left on the primary, where it retains WAL.
func (r *relay) checkReplicationServer(ctx context.Context, ctl, slots *control.Conn) error {
	prim, err := readIdentity(ctx, ctl)
	if err != nil {
		return fmt.Errorf("reading the primary's identity: %w", err)
	}
	repl, err := readIdentity(ctx, slots)
	if err != nil {
		return fmt.Errorf("reading the replication server's identity: %w", err)
	}
	switch {
	case repl.system != prim.system:
		return control.Permanentf("replication-url reaches another cluster (system identifier %s) than database-url (%s): decode on a physical standby of the primary", repl.system, prim.system)
	case repl.database != prim.database:
		return control.Permanentf("replication-url reaches database %q, database-url %q: both must name the same database", repl.database, prim.database)
	case repl.recovery && repl.version < 160000:
		return control.Permanentf("replication-url reaches a standby of PostgreSQL %d.%d: logical decoding on a standby needs PostgreSQL 16 or later", repl.version/10000, repl.version%10000)
	case !repl.recovery && !repl.started.Equal(prim.started):
		// Not permanent: a failover in progress, or a multi-host
		// database-url that has not followed the promotion yet.
		return fmt.Errorf("replication-url reaches a server that is not in recovery and is not database-url's primary (a promoted standby?): point both at the new primary, or --replication-url at a standby of it")
	}
	if repl.recovery && repl.hsFeedback != "on" {
		r.d.Logger.Warn("hot_standby_feedback is off on the replication standby: the primary's vacuum may invalidate the slot there, and each invalidation costs a gap recovery (republishing from the outbox)")
	}
	if repl.recovery {
		var onPrimary bool
		err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'logical')`, r.cfg.Slot).Scan(&onPrimary)
		})
		if err != nil {
			return fmt.Errorf("looking up slot %s on the primary: %w", r.cfg.Slot, err)
		}
		if onPrimary {
			r.d.Logger.Warn("a logical slot of the same name exists on the primary, which this reader does not read: it retains WAL there until dropped (`eventforge slot drop` against the primary)", "slot", r.cfg.Slot)
		}
	}
	return nil
}
