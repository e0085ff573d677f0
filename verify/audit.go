package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/consumer/audit"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

type auditor struct {
	cfg  Config
	pool *pgxpool.Pool
	// slots reads the relay's slot: pool, or a pool on the standby the
	// relay decodes on (Config.ReplicationURL).
	slots *pgxpool.Pool
	kafka *kafkaread.Reader
}

func newAuditor(ctx context.Context, cfg Config) (*auditor, error) {
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	slots := pool
	if cfg.ReplicationURL != "" {
		if slots, err = pgxpool.New(ctx, cfg.ReplicationURL); err != nil {
			pool.Close()
			return nil, fmt.Errorf("connecting to the replication server: %w", err)
		}
	}
	kr, err := kafkaread.New(cfg.KafkaBrokers)
	if err != nil {
		pool.Close()
		if slots != pool {
			slots.Close()
		}
		return nil, err
	}
	return &auditor{cfg: cfg, pool: pool, slots: slots, kafka: kr}, nil
}

func (a *auditor) close() {
	a.kafka.Close()
	if a.slots != a.pool {
		a.slots.Close()
	}
	a.pool.Close()
}

func (a *auditor) run(ctx context.Context) (*Report, error) {
	rep := newReport()

	// 1. The outbox snapshot, then the WAL position after it: every row of
	// the snapshot committed before that position.
	events, err := a.outbox(ctx)
	if err != nil {
		return nil, err
	}
	rep.LogicalEvents = len(events)
	walAfter, err := a.currentWAL(ctx)
	if err != nil {
		return nil, err
	}
	if a.cfg.Wait > 0 {
		rep.Drained = a.waitDrained(ctx, walAfter)
	}
	confirmed, err := a.slotConfirmed(ctx)
	if err != nil {
		return nil, err
	}
	if now, err := a.currentWAL(ctx); err == nil && now > confirmed {
		rep.SlotLagBytes = int64(now - confirmed)
	}
	slotPassed := confirmed >= walAfter

	// 2. Committed offsets before marks: an offset is committed only after
	// the marks of the records before it, so marks read afterwards cover it.
	committed, err := a.committedOffsets()
	if err != nil {
		return nil, err
	}

	// 3. The relay's dead letters, after the slot position (the relay
	// writes a dead letter before it confirms past its event) and before
	// the topic (a replay publishes before it marks the row replayed, so a
	// row read as replayed has its record in the topic read after it).
	relay, err := a.relayDeadLetters(ctx)
	if err != nil {
		return nil, err
	}

	// 4. Kafka as stored: the topic, the DLQ and the DLQ's low watermarks;
	// then the purge records. A purge records its dead letters before
	// deleting them, so a dead letter missing from the DLQ read here (or
	// below a low watermark read here) has its purge record read after it.
	records, err := a.kafka.ReadAll(ctx, a.cfg.Topic)
	if err != nil {
		return nil, err
	}
	dlqRecords, purged, err := a.dlqState(ctx, rep)
	if err != nil {
		return nil, err
	}

	// 5. Deliveries, publication, the relay's dead letters and ordering.
	a.checkDeliveries(rep, events, records, slotPassed, relay)

	// 6. Each consumer: skipped records and business effects, with every
	// event attributed to its order from whatever still holds it.
	attr := attribute(events, records, dlqRecords, purged, relay)
	dead := byConsumer(dlqRecords)
	for name := range a.cfg.Consumers {
		marks, err := a.marks(ctx, name)
		if err != nil {
			return nil, err
		}
		checkConsumer(rep, name, records, committed[name], marks, dead[name], purged.ids(name))
		eff, err := effectChecks[name](ctx, a.pool, name, attr.scope())
		if err != nil {
			return nil, fmt.Errorf("checking effects of %s: %w", name, err)
		}
		rep.addEffects(name, eff)
	}
	return rep, nil
}

// dlqState reads the DLQ, its low watermarks, then the purge records (in
// that order, see run), and counts the dead letters that left the DLQ
// without a purge record (checkDeparted).
func (a *auditor) dlqState(ctx context.Context, rep *Report) ([]kafkaread.Record, purgeRecords, error) {
	dlqRecords, err := a.dlqRecords(ctx)
	if err != nil {
		return nil, nil, err
	}
	low, err := a.dlqLowWatermarks()
	if err != nil {
		return nil, nil, err
	}
	purged, err := a.purged(ctx)
	if err != nil {
		return nil, nil, err
	}
	return dlqRecords, purged, a.checkDeparted(ctx, rep, low)
}

// newReport is an empty report of a drained pipeline.
func newReport() *Report {
	return &Report{
		BusinessChanges:   map[string]int{},
		Pending:           map[string]int{},
		DeadLettered:      map[string]int{},
		Purged:            map[string]int{},
		UnattributedMarks: map[string]int{},
		Drained:           true,
	}
}

// committedOffsets reads each consumer's committed offsets on the topic.
func (a *auditor) committedOffsets() (map[string]map[int32]int64, error) {
	committed := map[string]map[int32]int64{}
	for name, group := range a.cfg.Consumers {
		c, err := a.kafka.Committed(group, a.cfg.Topic)
		if err != nil {
			return nil, err
		}
		committed[name] = c
	}
	return committed, nil
}

// addEffects adds what the effect check of consumer name found.
func (rep *Report) addEffects(name string, eff audit.Effects) {
	rep.BusinessChanges[name] = eff.Changes
	rep.DuplicateEffects += eff.Duplicates
	rep.MarksWithoutEffect += eff.MarksWithoutEffect
	rep.EffectsWithoutMark += eff.EffectsWithoutMark
	rep.UnattributedMarks[name] = eff.Unattributed
	for _, d := range eff.Details {
		rep.violate("%s: %s", name, d)
	}
}

// waitDrained waits until the slot confirmed walAfter and every group
// committed up to the end of the topic, or cfg.Wait passes.
func (a *auditor) waitDrained(ctx context.Context, walAfter pglogrepl.LSN) bool {
	deadline := time.Now().Add(a.cfg.Wait)
	for {
		if a.drained(ctx, walAfter) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (a *auditor) drained(ctx context.Context, walAfter pglogrepl.LSN) bool {
	confirmed, err := a.slotConfirmed(ctx)
	if err != nil || confirmed < walAfter {
		return false
	}
	ends, err := a.kafka.EndOffsets(a.cfg.Topic)
	if err != nil {
		return false
	}
	for _, group := range a.cfg.Consumers {
		committed, err := a.kafka.Committed(group, a.cfg.Topic)
		if err != nil {
			return false
		}
		for p, end := range ends {
			if end > 0 && committed[p] < end {
				return false
			}
		}
	}
	return true
}
