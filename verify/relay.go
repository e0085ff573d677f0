package verify

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/deadletter"
)

// ReplayDeadLettersCommand is what an operator runs to publish the relay's
// dead letters once their cause is fixed; the audit names it beside every
// one it reports.
const ReplayDeadLettersCommand = "eventforge outbox dead-letters replay"

// relayDeadLetters are the audited slot's rows of the relay's dead-letter
// table (records Kafka refused permanently), by event ID.
type relayDeadLetters map[string]deadletter.Row

// pending reports whether the relay dead-lettered event id and nobody
// replayed it yet.
func (r relayDeadLetters) pending(id string) bool {
	d, ok := r[id]
	return ok && d.ReplayedAt == nil
}

// relayDeadLetters reads the relay's dead letters of the audited slot (none
// on a schema without the table: before migration 00008, or with another
// --dead-letter-table that does not exist).
func (a *auditor) relayDeadLetters(ctx context.Context) (relayDeadLetters, error) {
	table := a.cfg.DeadLetterTable
	var exists bool
	if err := a.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
		return nil, fmt.Errorf("looking for %s: %w", table, err)
	}
	if !exists {
		return nil, nil
	}
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", table, err)
	}
	defer conn.Release()
	dls, err := deadletter.List(ctx, conn.Conn(), table, false)
	if err != nil {
		return nil, err
	}
	out := relayDeadLetters{}
	for _, d := range dls {
		if d.Slot == a.cfg.Slot {
			out[d.EventID] = d
		}
	}
	return out, nil
}

// checkRelayDeadLetters counts the events the relay dead-lettered that are
// neither replayed nor in the topic: nobody delivers them until an operator
// replays them. first holds the events found in the topic; a pending dead
// letter found there (replayed by `outbox replay`, or by a dead-letter
// replay that stopped before marking it) is delivered and audited as such.
func (a *auditor) checkRelayDeadLetters(rep *Report, relay relayDeadLetters, first map[string]pos) {
	ids := make([]string, 0, len(relay))
	for id := range relay {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return walBefore(relay[ids[i]], relay[ids[j]]) })
	for _, id := range ids {
		d := relay[id]
		if d.ReplayedAt != nil {
			rep.RelayReplayed++
			continue
		}
		if _, published := first[id]; published {
			continue
		}
		rep.RelayDeadLettered++
		rep.violate("dead-lettered by the relay: event %s (%s of order %s) refused by Kafka on %s at %s (%s, %d attempts); publish it with `%s` once the cause is fixed",
			id, d.Type, d.AggregateID, d.Topic, d.DeadLetteredAt.UTC().Format("2006-01-02T15:04:05Z"), d.ErrorCode, d.Attempts, ReplayDeadLettersCommand)
	}
}

// walBefore orders dead letters as the relay met them: by LSN, then event
// ID.
func walBefore(x, y deadletter.Row) bool {
	lx, errx := pglogrepl.ParseLSN(x.LSN)
	ly, erry := pglogrepl.ParseLSN(y.LSN)
	if errx == nil && erry == nil && lx != ly {
		return lx < ly
	}
	return x.EventID < y.EventID
}
