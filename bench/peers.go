package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/kafkaread"
	"github.com/eventforge/eventforge/schema"
)

// peersResult is the peers phase: the same work done by each relay.
type peersResult struct {
	// Backlog is the number of events committed for each relay's drain.
	Backlog int `json:"backlog_events"`
	// RecvlogicalPerSec is PostgreSQL's own client, pg_recvlogical,
	// streaming a copy of EventForge's slot over the same backlog to
	// /dev/null: the floor every drain rate is compared with.
	RecvlogicalPerSec float64        `json:"pg_recvlogical_events_per_sec"`
	Relays            []relayFigures `json:"relays"`
	// Unavailable names each relay that could not be set up, with why.
	Unavailable map[string]string `json:"unavailable,omitempty"`
	// Skipped names each relay --peer-relays left out.
	Skipped []string `json:"skipped,omitempty"`
}

// relayFigures is what the peers phase measured of one relay.
type relayFigures struct {
	Relay   string         `json:"relay"`
	Drain   relayDrain     `json:"drain"`
	Latency []relayLatency `json:"latency"`
}

// relayDrain is one relay draining the backlog, from the start of its
// process to the backlog's last record in Kafka.
type relayDrain struct {
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// FirstRecordSecs is from the start of the process to its first record
	// in Kafka (sampled every 20 ms).
	FirstRecordSecs float64 `json:"first_record_seconds"`
	PeakRSSBytes    int64   `json:"relay_peak_rss_bytes"`
	// RelayCPUPer1000 is the relay process's CPU seconds, start-up included.
	RelayCPUPer1000 float64 `json:"relay_cpu_seconds_per_1000_events"`
	// PostgresCPUPer1000 is the CPU seconds of the stack's PostgreSQL
	// cluster during the drain: every process of it, autovacuum and the
	// backends it reaped included.
	PostgresCPUPer1000 float64 `json:"postgres_cpu_seconds_per_1000_events"`
	// WALBytesPer1000 is the WAL the cluster wrote during the drain.
	WALBytesPer1000 float64 `json:"wal_bytes_per_1000_events"`
}

// relayLatency is commit → Kafka append at one offered load: the order's
// created_at (the order transaction's start, just before its commit) to
// the record's broker append time.
type relayLatency struct {
	OfferedPerSec  int     `json:"offered_per_sec"`
	AchievedPerSec float64 `json:"achieved_per_sec"`
	Orders         int     `json:"orders"`
	CommitToAppend latency `json:"commit_to_append"`
	// OtherCores is the cores processes outside the stack, the relay and
	// the benchmark used during the load: above a tenth of a core the
	// latency measures the machine's contention as much as the relay.
	OtherCores float64 `json:"other_cores"`
}

// peersPhase runs each relay on a database and topic of its own: the same
// backlog drained, then open-loop load at each offered rate.
func (r *runner) peersPhase(ctx context.Context) error {
	relays, unavailable, err := r.peerRelays(ctx)
	if err != nil {
		return err
	}
	res := &peersResult{Backlog: r.sz.peerBacklog, Unavailable: unavailable}
	for _, name := range peerColumns {
		if len(r.cfg.PeerRelays) > 0 && !slices.Contains(r.cfg.PeerRelays, name) {
			res.Skipped = append(res.Skipped, name)
		}
	}
	r.res.Peers = res
	for i, relay := range relays {
		r.logger.Info("peer relay", "relay", relay.Name())
		figures, recvlogical, err := r.measurePeer(ctx, relay, i == 0)
		if err != nil {
			return fmt.Errorf("relay %s: %w", relay.Name(), err)
		}
		res.Relays = append(res.Relays, figures)
		if recvlogical > 0 {
			res.RecvlogicalPerSec = recvlogical
		}
	}
	return nil
}

// measurePeer creates the relay's database and topic, commits the backlog,
// times the drain, offers each rate, and removes what it created. With
// reference set and the relay EventForge's reader, pg_recvlogical then
// drains a copy of its slot; recvlogical is its rate in events/s.
func (r *runner) measurePeer(ctx context.Context, relay peerRelay, reference bool) (fig relayFigures, recvlogical float64, err error) {
	fig.Relay = relay.Name()
	db, err := r.createPeerDB(ctx, strings.ToLower(relay.Name()))
	if err != nil {
		return fig, 0, err
	}
	defer r.dropPeerDB(ctx, db)
	topic, err := relay.Prepare(ctx, db)
	if cl, ok := relay.(peerCleaner); ok {
		defer func() {
			if err := cl.Cleanup(context.WithoutCancel(ctx), db); err != nil {
				r.logger.Warn("peer cleanup", "relay", relay.Name(), "err", err)
			}
		}()
	}
	if err != nil {
		return fig, 0, err
	}
	if err := r.env.createTopic(ctx, topic); err != nil {
		return fig, 0, err
	}
	if !r.cfg.Keep {
		defer r.env.deleteTopics(topic)
	}
	if err := commitOrders(ctx, db.dsn, r.logDir, r.sz.peerBacklog); err != nil {
		return fig, 0, fmt.Errorf("committing the backlog: %w", err)
	}
	var events int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&events); err != nil {
		return fig, 0, err
	}
	if err := settleDB(ctx, db.pool, r.env.endpoints.AdminDSN); err != nil {
		return fig, 0, err
	}
	target, err := currentWAL(ctx, db.pool)
	if err != nil {
		return fig, 0, err
	}
	ef, isReader := relay.(eventforgePeer)
	if reference && isReader {
		if err := copySlot(ctx, db.pool, ef.slot(db)); err != nil {
			return fig, 0, err
		}
	}
	c, err := r.drainPeer(ctx, relay, db, topic, events, &fig.Drain)
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		return fig, 0, err
	}
	if reference && isReader {
		secs, err := recvlogicalDrain(ctx, db.pool, db.dsn, ef.slot(db), target)
		if err != nil {
			return fig, 0, err
		}
		recvlogical = float64(events) / secs
	}
	for _, rate := range r.sz.peerRates {
		lat, err := r.peerLatency(ctx, relay.Name(), db, topic, c, rate)
		if err != nil {
			return fig, 0, err
		}
		fig.Latency = append(fig.Latency, lat)
	}
	return fig, recvlogical, nil
}

// drainPeer starts the relay on the committed backlog of events and waits
// until its topic holds them all, measuring the process, PostgreSQL's CPU
// and the WAL written meanwhile. It returns the running relay.
func (r *runner) drainPeer(ctx context.Context, relay peerRelay, db *peerDB, topic string, events int, d *relayDrain) (*child, error) {
	kr, err := kafkaread.New(r.env.endpoints.KafkaBootstrap)
	if err != nil {
		return nil, err
	}
	defer kr.Close()
	walBefore, err := currentWAL(ctx, db.pool)
	if err != nil {
		return nil, err
	}
	postmaster, err := postmasterPID(ctx, db.pool)
	if err != nil {
		return nil, err
	}
	cpuBefore, pgBefore := sampleCPU(nil), clusterCPU(postmaster)
	start := time.Now()
	c, err := relay.Start(ctx, db, topic, r.logDir)
	if err != nil {
		return nil, err
	}
	pids := map[int]string{c.Cmd.Process.Pid: relay.Name()}
	// Every 20 ms: a drain takes seconds, so the check adds little to the
	// time measured, and the end offsets cost the broker little to answer.
	err = waitEvery(ctx, 15*time.Minute, 20*time.Millisecond, relay.Name()+" published the backlog", func() (bool, error) {
		if !c.Running() {
			return false, fmt.Errorf("%s exited; see %s", relay.Name(), c.Log)
		}
		n, err := topicRecords(kr, topic)
		if err != nil {
			return false, nil
		}
		if n > 0 && d.FirstRecordSecs == 0 {
			d.FirstRecordSecs = time.Since(start).Seconds()
		}
		return n >= int64(events), nil
	})
	if err != nil {
		return c, err
	}
	secs := time.Since(start).Seconds()
	cpuAfter, pgAfter := sampleCPU(pids), clusterCPU(postmaster)
	u, err := c.sample()
	if err != nil {
		return c, fmt.Errorf("sampling %s: %w", relay.Name(), err)
	}
	walAfter, err := currentWAL(ctx, db.pool)
	if err != nil {
		return c, err
	}
	per1000 := func(v float64) float64 { return v / float64(events) * 1000 }
	pgCPU := (pgAfter - pgBefore).Seconds()
	*d = relayDrain{Events: events, Seconds: secs, EventsPerSec: float64(events) / secs, FirstRecordSecs: d.FirstRecordSecs,
		PeakRSSBytes: u.PeakRSSBytes, RelayCPUPer1000: per1000(u.CPU.Seconds()),
		PostgresCPUPer1000: per1000(pgCPU), WALBytesPer1000: per1000(float64(walAfter - walBefore))}
	r.res.CPU = append(r.res.CPU, coresBetween("peers: "+relay.Name()+" drain", cpuBefore, cpuAfter))
	return c, nil
}

// peerLatency offers rate orders per second to db with pgbench (open loop)
// while the relay runs, waits until every order is in Kafka, and measures
// commit → append for each; where the cores went meanwhile joins the CPU
// by phase.
func (r *runner) peerLatency(ctx context.Context, relay string, db *peerDB, topic string, c *child, rate int) (relayLatency, error) {
	lat := relayLatency{OfferedPerSec: rate}
	kr, err := kafkaread.New(r.env.endpoints.KafkaBootstrap)
	if err != nil {
		return lat, err
	}
	defer kr.Close()
	from, err := kr.EndOffsets(topic)
	if err != nil {
		return lat, err
	}
	var before, committed int64
	for _, o := range from {
		before += o
	}
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&committed); err != nil {
		return lat, err
	}
	secs := int(r.sz.peerDuration.Seconds())
	// 16 clients keep up with 2,000 transactions per second with room to
	// spare; pgbench's -R schedules them as a Poisson process.
	pids := map[int]string{c.Cmd.Process.Pid: relay}
	cpuBefore := sampleCPU(pids)
	tps, err := runPgbench(ctx, db.dsn, r.logDir, "-c", "16", "-R", strconv.Itoa(rate), "-T", strconv.Itoa(secs))
	cores := coresBetween(fmt.Sprintf("peers: %s at %d/s", relay, rate), cpuBefore, sampleCPU(pids))
	r.res.CPU = append(r.res.CPU, cores)
	lat.OtherCores = cores.Cores[cpuOther]
	if err != nil {
		return lat, fmt.Errorf("offering %d orders/s: %w", rate, err)
	}
	lat.AchievedPerSec = tps
	var total int64
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&total); err != nil {
		return lat, err
	}
	committed = total - committed
	err = waitFor(ctx, 5*time.Minute, fmt.Sprintf("the orders of %d/s in Kafka", rate), func() (bool, error) {
		if !c.Running() {
			return false, fmt.Errorf("relay exited; see %s", c.Log)
		}
		n, err := topicRecords(kr, topic)
		return err == nil && n >= before+committed, nil
	})
	if err != nil {
		return lat, err
	}
	recs, err := kr.ReadFrom(ctx, topic, from)
	if err != nil {
		return lat, err
	}
	lat.CommitToAppend, lat.Orders, err = commitToAppend(ctx, db.pool, recs)
	return lat, err
}

// commitToAppend joins each record's key (the order ID) to the order's
// created_at and returns the latencies of the first record of each order.
func commitToAppend(ctx context.Context, pool *pgxpool.Pool, recs []kafkaread.Record) (latency, int, error) {
	appended := make(map[string]time.Time, len(recs))
	keys := make([]string, 0, len(recs))
	for _, rec := range recs {
		if _, dup := appended[rec.Key]; !dup {
			appended[rec.Key] = rec.Timestamp
			keys = append(keys, rec.Key)
		}
	}
	rows, err := pool.Query(ctx, `SELECT id::text, created_at FROM orders WHERE id = ANY($1::uuid[])`, keys)
	if err != nil {
		return latency{}, 0, fmt.Errorf("reading order commit times: %w", err)
	}
	defer rows.Close()
	var d []time.Duration
	for rows.Next() {
		var id string
		var created time.Time
		if err := rows.Scan(&id, &created); err != nil {
			return latency{}, 0, err
		}
		d = append(d, appended[id].Sub(created))
	}
	if err := rows.Err(); err != nil {
		return latency{}, 0, err
	}
	return latencies(d), len(d), nil
}

// topicRecords is the sum of the end offsets of topic's partitions.
func topicRecords(kr *kafkaread.Reader, topic string) (int64, error) {
	ends, err := kr.EndOffsets(topic)
	var n int64
	for _, e := range ends {
		n += e
	}
	return n, err
}

func currentWAL(ctx context.Context, pool *pgxpool.Pool) (pglogrepl.LSN, error) {
	var s string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, fmt.Errorf("reading the WAL position: %w", err)
	}
	return pglogrepl.ParseLSN(s)
}

// settleDB vacuums and analyzes the database of pool, then checkpoints the
// cluster (adminDSN): settle for the benchmark's own database, and each
// peer's before its measurements.
func settleDB(ctx context.Context, pool *pgxpool.Pool, adminDSN string) error {
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
		return fmt.Errorf("vacuuming: %w", err)
	}
	admin, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpointing: %w", err)
	}
	return nil
}

// createPeerDB creates the relay's database with the schema migrated.
func (r *runner) createPeerDB(ctx context.Context, relay string) (*peerDB, error) {
	name := r.env.database + "_" + relay
	admin, err := pgx.Connect(ctx, r.env.endpoints.AdminDSN)
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER eventforge", pgx.Identifier{name}.Sanitize())); err != nil {
		return nil, fmt.Errorf("creating %s: %w", name, err)
	}
	u, err := url.Parse(r.env.dsn)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	db := &peerDB{name: name, dsn: u.String(), kafka: r.env.endpoints.KafkaBootstrap}
	if err := schema.Migrate(ctx, db.dsn, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return db, err
	}
	db.pool, err = pgxpool.New(ctx, db.dsn)
	return db, err
}

// dropPeerDB drops the database and its replication slots, unless the run
// keeps what it created.
func (r *runner) dropPeerDB(ctx context.Context, db *peerDB) {
	if db.pool != nil {
		db.pool.Close()
	}
	if r.cfg.Keep {
		return
	}
	ctx = context.WithoutCancel(ctx)
	admin, err := pgx.Connect(ctx, r.env.endpoints.AdminDSN)
	if err != nil {
		r.logger.Warn("dropping peer database", "database", db.name, "err", err)
		return
	}
	defer admin.Close(ctx)
	// A slot whose walsender is still exiting cannot be dropped yet.
	_ = waitFor(ctx, 30*time.Second, "slots of "+db.name+" dropped", func() (bool, error) {
		_, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, db.name)
		return err == nil, nil
	})
	if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{db.name}.Sanitize())); err != nil {
		r.logger.Warn("dropping peer database", "database", db.name, "err", err)
	}
}

// deleteTopics deletes topics, as cleanup does the benchmark's own.
func (e *env) deleteTopics(topics ...string) {
	e.deleteTopicsAndGroups(topics, nil)
}

// deleteGroups deletes consumer groups, ignoring errors.
func (e *env) deleteGroups(groups ...string) {
	e.deleteTopicsAndGroups(nil, groups)
}

// deleteTopicsAndGroups deletes topics and consumer groups, ignoring
// errors: a cleanup that fails leaves names the next run does not reuse.
func (e *env) deleteTopicsAndGroups(topics, groups []string) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.endpoints.KafkaBootstrap, "broker.address.family": "v4"})
	if err != nil {
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if len(topics) > 0 {
		_, _ = a.DeleteTopics(ctx, topics)
	}
	if len(groups) > 0 {
		_, _ = a.DeleteConsumerGroups(ctx, groups)
	}
}
