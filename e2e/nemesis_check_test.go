package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// progressBound is how long after healing every committed event must be in
// Kafka (or in the relay's dead-letter table): a relay that has not got
// there is wedged.
const progressBound = 3 * time.Minute

// scheduleResult is what one schedule did and found.
type scheduleResult struct {
	mode          standbyMode
	faults        map[string]int // applied, by kind
	faultsSkipped int            // planned but not applicable at the time
	orders        int
	events        int
	deliveries    int
	duplicates    int
	// lostWithTimeline counts orders the api acknowledged that a promoted
	// asynchronous standby lacked: gone from the database, which EventForge
	// cannot repair.
	lostWithTimeline int
	// recovery is the time from the end of the heal until every committed
	// event was in Kafka or dead-lettered by the relay.
	recovery time.Duration
	// takeovers are the times from a partition of the active reader until
	// the other one published.
	takeovers  []time.Duration
	violations []string
}

func (r *scheduleResult) violate(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

// scheduleRun is one schedule being run.
type scheduleRun struct {
	t            *testing.T
	stack        *nemesisStack
	work         *workload
	mu           sync.Mutex
	res          *scheduleResult
	failedOver   bool
	failedOverAt time.Time // when the primary was killed
}

// runSchedule runs one schedule of seed with a fault phase of length phase
// and reports its violations as test errors.
func runSchedule(t *testing.T, seed uint64, phase time.Duration) *scheduleResult {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973))
	mode := noStandby
	switch rng.IntN(4) {
	case 0:
		mode = syncStandby
	case 1:
		mode = asyncStandby
	}
	plan := planFaults(rng, phase, mode != noStandby)
	t.Logf("schedule of seed %d on PostgreSQL %d, standby %s, fault phase %s, %d faults (%v); replay it with `make nemesis SEED=%d DURATION=1m`:\n%s",
		seed, nemesisPGVersion(), mode, phase, len(plan), countKinds(plan), seed, describePlan(plan))

	r := &scheduleRun{t: t, res: &scheduleResult{mode: mode, faults: map[string]int{}}}
	r.stack = newNemesisStack(t, mode)
	r.stack.startProcesses()
	r.waitReaderActive(time.Minute)
	pool := r.stack.pl.env.Pool
	r.work = &workload{t: t, pl: r.stack.pl, pool: pool, dsn: r.stack.pl.env.DatabaseURL,
		rng: rand.New(rand.NewPCG(seed, 0x776f726b)), ledger: newNemesisLedger()}

	ctx, stop := context.WithCancel(context.Background())
	r.work.start(ctx)
	r.runFaults(context.Background(), plan)
	stop()
	r.work.wait()
	r.heal()
	r.check()

	res := r.res
	for _, v := range res.violations {
		t.Error(v)
	}
	t.Logf("schedule of seed %d: faults %v (%d not applicable), orders %d, events %d, deliveries %d (duplicates %d), recovery after healing %s, takeovers after a partition %v, acknowledged orders lost with an asynchronous standby %d, violations %d",
		seed, res.faults, res.faultsSkipped, res.orders, res.events, res.deliveries, res.duplicates, res.recovery.Round(100*time.Millisecond),
		res.takeovers, res.lostWithTimeline, len(res.violations))
	return res
}

// waitReaderActive waits until one of the two readers publishes.
func (r *scheduleRun) waitReaderActive(timeout time.Duration) {
	testenv.Eventually(r.t, timeout, "a reader active", func() error {
		for _, addr := range r.stack.readerMetrics {
			if v, ok := scrape(addr, "eventforge_cdc_active"); ok && v == 1 {
				return nil
			}
		}
		return fmt.Errorf("no reader reports eventforge_cdc_active 1")
	})
}

// heal ends what the faults and the writers left behind: prepared
// transactions are resolved as their writer meant to, long transactions
// ended, every process resumed or restarted.
func (r *scheduleRun) heal() {
	ctx := context.Background()
	err := r.appConn(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'nemesis-%' AND database = current_database()`)
		if err != nil {
			return err
		}
		gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, gid := range gids {
			commit := true
			r.work.ledger.do(func(l *nemesisLedger) {
				if c, ok := l.prepared[gid]; ok {
					commit = c
				}
			})
			if err := r.work.resolvePrepared(ctx, gid, commit); err != nil {
				return fmt.Errorf("resolving prepared transaction %s: %w", gid, err)
			}
		}
		_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, nemesisLongApp)
		return err
	})
	if err != nil {
		r.res.violate("healing the database: %v", err)
	}
	if err := r.stack.kafka.Resume(0); err != nil {
		r.t.Logf("resuming the broker: %v", err)
	}
	// The broker may still be coming back from a kill or a restart: the
	// limit is retried for as long as the drain is given.
	err = retryFor(3*time.Minute, func() error { return alterTopicMaxMessageBytes(r.stack.kafka.Bootstrap, r.stack.pl.env.Topic, 0) })
	if err != nil {
		r.res.violate("restoring the topic limit: %v", err)
	}
	r.stack.healProcesses()
	if r.failedOver && r.stack.mode == asyncStandby {
		r.rewindConsumers()
	}
}

// rewindMargin is how far before a failover the consumers are rewound: more
// than an asynchronous standby lags behind here.
const rewindMargin = time.Minute

// rewindConsumers is the runbook for a failover to an asynchronous standby
// (docs/operations.md): a consumer's transaction committed on the old
// primary shortly before it died can be missing on the new one while its
// Kafka offset stays committed, so that effect would never be applied
// again. Stopping the consumers, moving each group's offsets back to a
// minute before the failover, and starting them again redelivers those
// events; the marks skip every one that survived.
func (r *scheduleRun) rewindConsumers() {
	at := r.failedOverAt.Add(-rewindMargin)
	for _, c := range []struct{ name, group string }{{"fulfillment", r.stack.pl.env.Group}, {"ledger", r.stack.ledger}} {
		comp := r.stack.byName[c.name]
		comp.current().stop()
		// The coordinator drops the stopped member at its session timeout;
		// only then may offsets be committed for the group from outside.
		err := retryFor(time.Minute, func() error { return rewindGroup(r.stack.kafka.Bootstrap, c.group, r.stack.pl.env.Topic, at) })
		if err != nil {
			r.res.violate("rewinding group %s to %s: %v", c.group, at.Format(time.TimeOnly), err)
		}
		comp.restart()
	}
	r.t.Logf("consumers rewound to %s, %s before the failover", at.Format(time.TimeOnly), rewindMargin)
}

// retryFor calls f until it succeeds or d passed, and returns its last
// error.
func retryFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

// rewindGroup commits, for the group, the offsets of topic's records at
// time at (the end of a partition with none after it). The group must have
// no member.
func rewindGroup(bootstrap, group, topic string, at time.Time) error {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": false, "log_level": 0})
	if err != nil {
		return err
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return err
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.Offset(at.UnixMilli())})
	}
	tps, err = c.OffsetsForTimes(tps, 10000)
	if err != nil {
		return err
	}
	for i, tp := range tps {
		if tp.Offset < 0 { // no record at or after the time: the end
			_, high, err := c.QueryWatermarkOffsets(topic, tp.Partition, 10000)
			if err != nil {
				return err
			}
			tps[i].Offset = kafka.Offset(high)
		}
	}
	_, err = c.CommitOffsets(tps)
	return err
}

// committedEvent is an event that committed on the surviving timeline.
type committedEvent struct {
	id, orderID, typ string
}

// committedEvents returns every committed event: the outbox rows, and the
// rows deleted in their own transaction whose order committed.
func (r *scheduleRun) committedEvents(ctx context.Context) ([]committedEvent, error) {
	pool := r.stack.pl.env.Pool
	rows, err := pool.Query(ctx, `SELECT id::text, aggregateid, type FROM outbox`)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (committedEvent, error) {
		var e committedEvent
		return e, row.Scan(&e.id, &e.orderID, &e.typ)
	})
	if err != nil {
		return nil, err
	}
	var deleted map[string]string
	r.work.ledger.do(func(l *nemesisLedger) { deleted = maps.Clone(l.deleted) })
	ids := make([]string, 0, len(deleted))
	for _, o := range deleted {
		ids = append(ids, o)
	}
	rows, err = pool.Query(ctx, `SELECT id::text FROM orders WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, err
	}
	exists, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	committed := map[string]bool{}
	for _, id := range exists {
		committed[id] = true
	}
	for ev, o := range deleted {
		if committed[o] {
			out = append(out, committedEvent{id: ev, orderID: o, typ: contract.TypeOrderCreated})
		}
	}
	return out, nil
}

// relayDeadLetters returns the event IDs in the relay's dead-letter table
// not replayed yet.
func (r *scheduleRun) relayDeadLetters(ctx context.Context) (map[string]bool, error) {
	rows, err := r.stack.pl.env.Pool.Query(ctx, `SELECT event_id::text FROM cdc_dead_letters WHERE replayed_at IS NULL`)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out, err
}

// check drains the healed pipeline and checks the promise on durable state.
func (r *scheduleRun) check() {
	ctx := context.Background()
	env, res := r.stack.pl.env, r.res
	healed := time.Now()

	// Progress: every committed event in Kafka or dead-lettered, within
	// the bound.
	var missing []committedEvent
	for {
		committed, err := r.committedEvents(ctx)
		if err != nil {
			res.violate("reading the committed events: %v", err)
			return
		}
		dead, err := r.relayDeadLetters(ctx)
		if err != nil {
			res.violate("reading the relay's dead letters: %v", err)
			return
		}
		recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
		if err != nil {
			res.violate("reading the topic: %v", err)
			return
		}
		inKafka := map[string]bool{}
		for _, rec := range recs {
			inKafka[rec.Headers[contract.HeaderID]] = true
		}
		missing = missing[:0]
		for _, e := range committed {
			if !inKafka[e.id] && !dead[e.id] {
				missing = append(missing, e)
			}
		}
		if len(missing) == 0 {
			res.recovery = time.Since(healed)
			break
		}
		if time.Since(healed) > progressBound {
			res.violate("no progress: %d of %d committed events neither in Kafka nor dead-lettered %s after healing (first: %s, %s of order %s)",
				len(missing), len(committed), progressBound, missing[0].id, missing[0].typ, missing[0].orderID)
			// What did reach Kafka is still checked (phantoms, order).
			r.checkKafka(ctx)
			return
		}
		time.Sleep(time.Second)
	}

	// What the relay refused is replayed once the causes are gone (the
	// topic limit is back; malformed headers are repaired in the row).
	if _, err := env.Pool.Exec(ctx, `UPDATE cdc_dead_letters SET headers = '{}' WHERE replayed_at IS NULL AND left(ltrim(headers), 1) <> '{'`); err != nil {
		res.violate("repairing dead letters: %v", err)
	}
	if out := eventforge(r.t, anyExit, "outbox", "dead-letters", "replay", "--database-url", env.DatabaseURL,
		"--kafka-brokers", env.Endpoints.KafkaBootstrap); out.Code != 0 {
		res.violate("outbox dead-letters replay: exit %d: %s", out.Code, out.Stderr)
	}

	rep, code := runVerifyArgs(r.t, r.stack.pl, "--wait", "3m", "--consumer", "fulfillment="+env.Group, "--consumer", "ledger="+r.stack.ledger)
	res.events, res.deliveries, res.duplicates = rep.LogicalEvents, rep.Deliveries, rep.DuplicateDeliveries
	if code != 0 || !rep.OK() {
		res.violate("verify: exit %d: %v; %v", code, rep.Failures(), rep.Violations)
	}
	for name, n := range rep.DeadLettered {
		if n > 0 {
			res.violate("consumer %s dead-lettered %d events of orders that exist", name, n)
		}
	}
	r.checkKafka(ctx)
}

// checkKafka checks what verify cannot see: the events of rows deleted in
// their own transaction, events of rolled-back work, phantoms and phantom
// effects, per-order first deliveries, and orders the api acknowledged.
func (r *scheduleRun) checkKafka(ctx context.Context) {
	env, res := r.stack.pl.env, r.res
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		res.violate("reading the topic: %v", err)
		return
	}
	committed, err := r.committedEvents(ctx)
	if err != nil {
		res.violate("reading the committed events: %v", err)
		return
	}
	rows, err := env.Pool.Query(ctx, `SELECT id::text FROM orders`)
	if err != nil {
		res.violate("reading the orders: %v", err)
		return
	}
	orderIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		res.violate("reading the orders: %v", err)
		return
	}
	orders := map[string]bool{}
	for _, id := range orderIDs {
		orders[id] = true
	}
	res.orders = len(orders)
	rows, err = env.Pool.Query(ctx, `SELECT event_id::text FROM cdc_dead_letters`)
	if err != nil {
		res.violate("reading the relay's dead letters: %v", err)
		return
	}
	deadIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		res.violate("reading the relay's dead letters: %v", err)
		return
	}
	dead := map[string]bool{}
	for _, id := range deadIDs {
		dead[id] = true
	}

	inKafka := map[string]bool{}
	first := map[string]string{} // order → type of its first record
	deadKey := map[string]bool{}
	phantoms := 0
	for _, rec := range recs {
		id := rec.Headers[contract.HeaderID]
		inKafka[id] = true
		if dead[id] {
			deadKey[rec.Key] = true
		}
		if _, ok := first[rec.Key]; !ok {
			first[rec.Key] = rec.Headers[contract.HeaderType]
		}
		if !orders[rec.Key] {
			phantoms++
			if phantoms <= 5 {
				res.violate("phantom: %s %s of order %s is in Kafka (partition %d offset %d) but the order never committed",
					rec.Headers[contract.HeaderType], id, rec.Key, rec.Partition, rec.Offset)
			}
		}
	}
	if phantoms > 5 {
		res.violate("phantom: %d records in all of orders that never committed", phantoms)
	}
	lost := 0
	for _, e := range committed {
		if inKafka[e.id] {
			continue
		}
		if lost++; lost <= 5 {
			res.violate("lost: %s %s of order %s committed but is not in Kafka after the replay", e.typ, e.id, e.orderID)
		}
	}
	if lost > 5 {
		res.violate("lost: %d committed events in all are not in Kafka after the replay", lost)
	}
	for key, typ := range first {
		if typ != contract.TypeOrderCreated && orders[key] && !deadKey[key] {
			res.violate("ordering: the first record of order %s in Kafka is %s, not its OrderCreated", key, typ)
		}
	}
	var rolledBack, acknowledged map[string]bool
	r.work.ledger.do(func(l *nemesisLedger) {
		rolledBack, acknowledged = maps.Clone(l.rolledBack), maps.Clone(l.acknowledged)
	})
	for id := range rolledBack {
		if orders[id] {
			res.violate("rolled back, yet order %s exists", id)
		}
	}
	var phantomEffects int
	err = env.Pool.QueryRow(ctx, `SELECT count(*) FROM orders o WHERE o.status = 'cancelled'
		AND NOT EXISTS (SELECT FROM outbox ob WHERE ob.aggregateid = o.id::text AND ob.type = 'OrderCancelled')`).Scan(&phantomEffects)
	if err != nil {
		res.violate("reading cancelled orders: %v", err)
	} else if phantomEffects > 0 {
		res.violate("phantom effect: %d orders are cancelled without an OrderCancelled event that committed", phantomEffects)
	}
	lost = 0
	for id := range acknowledged {
		if !orders[id] {
			lost++
		}
	}
	switch {
	case lost == 0:
	case r.failedOver && r.stack.mode == asyncStandby:
		res.lostWithTimeline = lost
	default:
		res.violate("lost: %d orders the api acknowledged are not in the database (standby %s, failed over %v)", lost, r.stack.mode, r.failedOver)
	}
}
