package deadletter

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/outbox"
)

// Row is one row of the relay's dead-letter table.
type Row struct {
	EventID        string     `json:"event_id"`
	Slot           string     `json:"slot"`
	LSN            string     `json:"lsn"`
	Topic          string     `json:"topic"`
	AggregateType  string     `json:"aggregatetype"`
	AggregateID    string     `json:"aggregateid"`
	Type           string     `json:"type"`
	PayloadBytes   int        `json:"payload_bytes"`
	ErrorCode      string     `json:"error_code"`
	Error          string     `json:"error"`
	Attempts       int        `json:"attempts"`
	DeadLetteredAt time.Time  `json:"dead_lettered_at"`
	ReplayedAt     *time.Time `json:"replayed_at"`
}

// List reads the dead letters of table in WAL order; with pending, only
// those not replayed yet.
func List(ctx context.Context, conn *pgx.Conn, table string, pending bool) ([]Row, error) {
	ident, err := outbox.ParseTable(table)
	if err != nil {
		return nil, err
	}
	where := ""
	if pending {
		where = " WHERE replayed_at IS NULL"
	}
	rows, _ := conn.Query(ctx, `SELECT event_id, slot, lsn::text, topic, aggregatetype, aggregateid, type, octet_length(payload),
		error_code, error, attempts, dead_lettered_at, replayed_at FROM `+ident.Sanitize()+where+` ORDER BY lsn, event_id`)
	dls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var d Row
		err := r.Scan(&d.EventID, &d.Slot, &d.LSN, &d.Topic, &d.AggregateType, &d.AggregateID, &d.Type, &d.PayloadBytes,
			&d.ErrorCode, &d.Error, &d.Attempts, &d.DeadLetteredAt, &d.ReplayedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading dead letters from %s: %w", table, err)
	}
	return dls, nil
}
