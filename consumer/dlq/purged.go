package dlq

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs one SQL statement: *pgx.Conn, *pgxpool.Pool and pgx.Tx are
// Execers.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// recordChunk is how many dlq_purged rows one statement writes.
const recordChunk = 5000

// RecordPlanned writes a dlq_purged row (RecordPurge) for every record of
// topic that plans delete, reading them with Scan's bounded memory, and
// returns how many it wrote. Call it before Purge: it fails, and nothing
// should be deleted, unless it read every planned record.
func RecordPlanned(ctx context.Context, c *kafka.Consumer, db Execer, topic string, plans []PurgePlan) (int64, error) {
	var written, want int64
	chunk := make([]Entry, 0, recordChunk)
	flush := func() error {
		if err := RecordPurge(ctx, db, chunk); err != nil {
			return err
		}
		written += int64(len(chunk))
		chunk = chunk[:0]
		return nil
	}
	for _, pl := range plans {
		want += pl.To - pl.Low
		err := ScanRange(ctx, c, topic, pl.Partition, pl.Low, pl.To, func(e Entry) error {
			e.Value, e.Headers = nil, nil // a purge record keeps neither
			chunk = append(chunk, e)
			if len(chunk) == recordChunk {
				return flush()
			}
			return nil
		})
		if err != nil {
			return written, err
		}
	}
	if err := flush(); err != nil {
		return written, err
	}
	if written != want {
		return written, fmt.Errorf("read %d of the %d records to purge from %s", written, want, topic)
	}
	return written, nil
}

// RecordPurge writes one dlq_purged row per entry, keyed by its DLQ
// position (writing a position again changes nothing). Call it before
// Purge deletes the entries: the delivery auditor then reports their
// events as purged, not lost (docs/verify.md).
func RecordPurge(ctx context.Context, db Execer, es []Entry) error {
	if len(es) == 0 {
		return nil
	}
	var (
		topics, consumers, ids, orders, types, classes []string
		partitions                                     []int32
		offsets                                        []int64
		at                                             []*string
	)
	for _, e := range es {
		topics, partitions, offsets = append(topics, e.Topic), append(partitions, e.Partition), append(offsets, e.Offset)
		consumers, ids, orders = append(consumers, e.Consumer), append(ids, e.EventID), append(orders, string(e.Key))
		types, classes = append(types, e.Type), append(classes, e.Class)
		var ts *string
		if !e.Timestamp.IsZero() {
			s := e.Timestamp.UTC().Format("2006-01-02T15:04:05.999999Z07:00")
			ts = &s
		}
		at = append(at, ts)
	}
	_, err := db.Exec(ctx, `INSERT INTO dlq_purged
		(dlq_topic, dlq_partition, dlq_offset, consumer, event_id, order_id, event_type, error_class, dead_lettered_at)
		SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[]::timestamptz[])
		ON CONFLICT DO NOTHING`, topics, partitions, offsets, consumers, ids, orders, types, classes, at)
	if err != nil {
		return fmt.Errorf("recording %d purged dead letters: %w", len(es), err)
	}
	return nil
}
