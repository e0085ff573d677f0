// Package standby is what the relay asks of PostgreSQL about its standbys:
// how far the standbys' physical slots flushed, and whether the server has
// standbys that nothing holds the relay back for.
//
// On PostgreSQL 15 and 16 a logical walsender sends a transaction as soon as
// its commit is flushed on the primary, also while the primary still waits
// for a synchronous standby. If the primary dies then, the relay has
// published an event of a commit the promoted standby never received: a
// phantom, an event of an order the new primary does not have. PostgreSQL
// 17 closes this with synchronized_standby_slots; for 15 and 16 the relay
// does the same itself with --synchronized-standby-slots: the stream holds a
// transaction's events back until every named physical slot flushed its
// commit (Flushed).
//
// Safe by default: a primary with standbys and nothing that holds the relay
// back until they have a commit can leave Kafka with events of orders a
// promoted standby lacks (a phantom OrderCancelled of an order the new
// primary has is applied). So before streaming, the relay looks for
// standbys — physical slots, and walsenders that hold no logical slot — and
// refuses to publish (CheckWait) when there are some and neither
// --synchronized-standby-slots nor the server's synchronized_standby_slots
// (PostgreSQL 17+) names any. The operator then chooses: the standbys'
// slots, or NoWait to publish without waiting.
package standby

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/schema"
)

// NoWait, as --synchronized-standby-slots, publishes without waiting for
// standbys.
const NoWait = "none"

// Slots are the physical slots of standbys the relay waits for
// (--synchronized-standby-slots): empty, NoWait alone, or slot names.
type Slots []string

// Waits reports whether the relay holds a transaction's events until the
// slots flushed its commit.
func (s Slots) Waits() bool { return len(s) > 0 && !s.NoWait() }

// NoWait reports whether the operator chose to publish without waiting.
func (s Slots) NoWait() bool { return len(s) == 1 && s[0] == NoWait }

// ErrNoSlots means none of the standby slots exists on the server (a
// promoted standby has none until one is built).
var ErrNoSlots = schema.ErrNoStandbySlots

// Flushed reads the oldest flush position of the named physical slots
// (schema.StandbySlotsFlushed); 0 when none has flushed anything yet.
func Flushed(ctx context.Context, ctl *control.Conn, slots Slots) (pglogrepl.LSN, error) {
	var lsn string
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) (err error) {
		lsn, err = schema.StandbySlotsFlushed(ctx, conn, slots)
		return err
	})
	if err != nil || lsn == "" {
		return 0, err
	}
	return pglogrepl.ParseLSN(lsn)
}

// state is what the server says about its standbys.
type state struct {
	physicalSlots, physicalSenders int
	serverWait                     string // synchronized_standby_slots (17+), or ""
}

// readState reads it on the control connection.
func readState(ctx context.Context, ctl *control.Conn) (state, error) {
	var st state
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical'),
			(SELECT count(*) FROM pg_stat_replication r
				WHERE NOT EXISTS (SELECT FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical')),
			coalesce(current_setting('synchronized_standby_slots', true), '')`).
			Scan(&st.physicalSlots, &st.physicalSenders, &st.serverWait)
	})
	if err != nil {
		return st, fmt.Errorf("looking for standbys: %w", err)
	}
	return st, nil
}

// CheckWait refuses to publish, with a permanent error, on a server with
// standbys when nothing waits for them and the operator did not choose not
// to wait.
func CheckWait(ctx context.Context, ctl *control.Conn, slots Slots, logger *slog.Logger) error {
	if slots.Waits() {
		return nil
	}
	st, err := readState(ctx, ctl)
	if err != nil {
		return err
	}
	if st.physicalSlots+st.physicalSenders == 0 || st.serverWait != "" {
		return nil
	}
	if slots.NoWait() {
		logger.Warn("publishing without waiting for the standbys (--synchronized-standby-slots none): after a failover Kafka can hold events of orders the new primary lacks",
			"physical_slots", st.physicalSlots, "physical_walsenders", st.physicalSenders)
		return nil
	}
	return control.Permanentf("this server has standbys (%d physical slots, %d physical walsenders) and nothing holds the relay back until they have a commit: "+
		"after a failover Kafka could hold events of orders the new primary lacks. Choose one: --synchronized-standby-slots <the standbys' physical slots>; "+
		"synchronized_standby_slots on the server (PostgreSQL 17+); or --synchronized-standby-slots %s to publish without waiting (docs/guarantees.md, \"Failover\")",
		st.physicalSlots, st.physicalSenders, NoWait)
}
