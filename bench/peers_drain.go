package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sort"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/kafkaread"
	"github.com/eventforge/eventforge/schema"
)

// peerHome is a database of the peers phase with its backlog: the relays of
// one home drain the same backlog, each run from a copy of a slot made
// before it (base), so every round drains the same events without
// committing them again. The polling relay deletes what it publishes: each
// of its drains runs on a copy of its database (clones), the last of which
// takes its latency windows.
type peerHome struct {
	db *peerDB
	// base is the slot made before the backlog; empty for a home of the
	// polling relay.
	base string
	// target is the WAL position after the backlog; events its size.
	target pglogrepl.LSN
	events int
	clones bool
	last   *peerDB // the latest copy (clones)
}

// live is the database the relays of h take their latency windows on.
func (h *peerHome) live() *peerDB {
	if h.clones {
		return h.last
	}
	return h.db
}

// peerHomes creates the home database of each relay (one per Traits.Home),
// readies it with every relay's Prepare and its base slot, and commits the
// backlog into it. It returns what it created, also on error, so the
// caller can drop it.
func (r *runner) peerHomes(ctx context.Context, relays []peerRelay) (map[string]*peerHome, error) {
	homes := map[string]*peerHome{}
	var order []string
	for _, relay := range relays {
		t := relay.Traits()
		h, ok := homes[t.Home]
		if !ok {
			db, err := r.createPeerDB(ctx, t.Home)
			if db != nil {
				h = &peerHome{db: db, clones: !t.Slot}
				homes[t.Home] = h
				order = append(order, t.Home)
			}
			if err != nil {
				return homes, err
			}
		}
		if err := relay.Prepare(ctx, h.db); err != nil {
			return homes, fmt.Errorf("preparing %s: %w", t.Name, err)
		}
		if t.Slot && h.base == "" {
			h.base = h.db.name + "_base"
			if _, err := h.db.pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, h.base); err != nil {
				return homes, fmt.Errorf("creating slot %s: %w", h.base, err)
			}
		}
	}
	for _, key := range order {
		if err := r.fillPeerHome(ctx, homes[key]); err != nil {
			return homes, err
		}
	}
	return homes, nil
}

// fillPeerHome commits the backlog into h, settles it and notes where the
// WAL ends. A home whose drains run on copies is then left without
// connections, as a template must be.
func (r *runner) fillPeerHome(ctx context.Context, h *peerHome) error {
	if err := commitOrders(ctx, h.db.dsn, r.logDir, r.sz.peerBacklog); err != nil {
		return fmt.Errorf("committing the backlog into %s: %w", h.db.name, err)
	}
	if err := h.db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&h.events); err != nil {
		return err
	}
	if err := settleDB(ctx, h.db.pool, r.env.endpoints.AdminDSN); err != nil {
		return err
	}
	var err error
	if h.target, err = currentWAL(ctx, h.db.pool); err != nil {
		return err
	}
	if h.clones {
		h.db.pool.Close()
		h.db.pool = nil
	}
	return nil
}

// dropBaseSlots drops the homes' base slots once every drain copied them,
// so they retain no WAL during the latency windows.
func (r *runner) dropBaseSlots(ctx context.Context, homes map[string]*peerHome) {
	for _, h := range homes {
		if h.base != "" {
			r.dropSlot(ctx, h.db, h.base)
		}
	}
}

// dropPeerHomes drops every home and copy, unless the run keeps them.
func (r *runner) dropPeerHomes(ctx context.Context, homes map[string]*peerHome) {
	keys := make([]string, 0, len(homes))
	for k := range homes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if h := homes[k]; h.last != nil {
			r.dropPeerDB(ctx, h.last)
		}
		r.dropPeerDB(ctx, homes[k].db)
	}
}

// peerDrain is the relay's drain of round: on a copy of the base slot (or of
// the database), into a topic of the run's own.
func (r *runner) peerDrain(ctx context.Context, relay peerRelay, h *peerHome, round int) (relayDrain, error) {
	t := relay.Traits()
	db := h.db
	if h.clones {
		if h.last != nil {
			r.dropPeerDB(ctx, h.last)
			h.last = nil
		}
		var err error
		if db, err = r.clonePeerDB(ctx, h.db, fmt.Sprintf("d%d", round)); err != nil {
			return relayDrain{}, err
		}
		h.last = db
	}
	run := newPeerRun(db, t, fmt.Sprintf("d%d", round))
	if t.Slot {
		if err := copySlot(ctx, db.pool, h.base, run.slot); err != nil {
			return relayDrain{}, err
		}
		defer r.dropSlot(ctx, db, run.slot)
	}
	if err := r.env.createTopic(ctx, run.topic); err != nil {
		return relayDrain{}, err
	}
	if !r.cfg.Keep {
		defer r.env.deleteTopics(run.topic)
	}
	if err := settleDB(ctx, db.pool, r.env.endpoints.AdminDSN); err != nil {
		return relayDrain{}, err
	}
	d := relayDrain{Round: round}
	c, err := r.drainPeer(ctx, relay, db, run, h.events, &d)
	if err == nil && h.clones {
		// The polling relay deletes a batch once Kafka acknowledged it: its
		// last delete commits just after the drain's last record, and the
		// copy that takes the latency windows must have no backlog left.
		err = waitFor(ctx, time.Minute, "the drained outbox emptied", func() (bool, error) {
			var left int
			err := db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&left)
			return left == 0, err
		})
	}
	if c != nil {
		c.stop()
	}
	return d, err
}

// drainPeer starts the relay for run on the committed backlog of events
// and waits until they are all visible to a read_committed reader:
// for a transactional relay, until such a reader tailing the topic read
// them all; for any other, until the topic's end offsets count them (its
// records are visible as they are appended). It measures the process,
// PostgreSQL's CPU and the WAL written meanwhile, and returns the running
// relay.
func (r *runner) drainPeer(ctx context.Context, relay peerRelay, db *peerDB, run peerRun, events int, d *relayDrain) (*child, error) {
	t := relay.Traits()
	kr, err := kafkaread.New(r.env.endpoints.KafkaBootstrap)
	if err != nil {
		return nil, err
	}
	defer kr.Close()
	visible := func() (int64, error) {
		n, err := topicRecords(kr, run.topic)
		if err != nil {
			return 0, nil // asked again 20 ms later
		}
		return n, nil
	}
	if t.Transactional {
		tail, err := startTail(r.env.endpoints.KafkaBootstrap, run.topic, false)
		if err != nil {
			return nil, err
		}
		defer tail.close()
		visible = func() (int64, error) {
			n, err := tail.records()
			return int64(n), err
		}
	}
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
	c, err := relay.Start(ctx, db, run, r.logDir)
	if err != nil {
		return nil, err
	}
	pids := map[int]string{c.Cmd.Process.Pid: t.Name}
	// Every 20 ms: a drain takes seconds, so the check adds little to the
	// time measured, and the end offsets cost the broker little to answer.
	err = waitEvery(ctx, 15*time.Minute, 20*time.Millisecond, t.Name+" published the backlog", func() (bool, error) {
		if !c.Running() {
			return false, fmt.Errorf("%s exited; see %s", t.Name, c.Log)
		}
		n, err := visible()
		if n > 0 && d.FirstRecordSecs == 0 {
			d.FirstRecordSecs = time.Since(start).Seconds()
		}
		return n >= int64(events), err
	})
	if err != nil {
		return c, err
	}
	secs := time.Since(start).Seconds()
	cpuAfter, pgAfter := sampleCPU(pids), clusterCPU(postmaster)
	u, err := c.sample()
	if err != nil {
		return c, fmt.Errorf("sampling %s: %w", t.Name, err)
	}
	walAfter, err := currentWAL(ctx, db.pool)
	if err != nil {
		return c, err
	}
	per1000 := func(v float64) float64 { return v / float64(events) * 1000 }
	pgCPU := (pgAfter - pgBefore).Seconds()
	d.Events, d.Seconds, d.EventsPerSec = events, secs, float64(events)/secs
	d.PeakRSSBytes, d.RelayCPUPer1000 = u.PeakRSSBytes, per1000(u.CPU.Seconds())
	d.PostgresCPUPer1000, d.WALBytesPer1000 = per1000(pgCPU), per1000(float64(walAfter-walBefore))
	r.res.CPU = append(r.res.CPU, coresBetween(fmt.Sprintf("peers: %s drain, round %d", t.Name, d.Round), cpuBefore, cpuAfter))
	return c, nil
}

// recvlogicalRound times pg_recvlogical over a copy of h's base slot.
func (r *runner) recvlogicalRound(ctx context.Context, h *peerHome, round int) (recvlogicalRound, error) {
	slot := fmt.Sprintf("%s_recvlogical_d%d", h.db.name, round)
	if err := copySlot(ctx, h.db.pool, h.base, slot); err != nil {
		return recvlogicalRound{}, err
	}
	if err := settleDB(ctx, h.db.pool, r.env.endpoints.AdminDSN); err != nil {
		return recvlogicalRound{}, err
	}
	before := sampleCPU(nil)
	secs, err := recvlogicalDrain(ctx, h.db.pool, h.db.dsn, slot, h.target)
	r.res.CPU = append(r.res.CPU, coresBetween(fmt.Sprintf("peers: pg_recvlogical drain, round %d", round), before, sampleCPU(nil)))
	if err != nil {
		return recvlogicalRound{}, err
	}
	return recvlogicalRound{Round: round, Events: h.events, Seconds: secs, EventsPerSec: float64(h.events) / secs}, nil
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
// peer's before each of its drains and latency windows.
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

// createPeerDB creates the database <bench database>_<suffix> with the
// schema migrated.
func (r *runner) createPeerDB(ctx context.Context, suffix string) (*peerDB, error) {
	return r.newPeerDB(ctx, r.env.database+"_"+suffix, "", func(db *peerDB) error {
		return schema.Migrate(ctx, db.dsn, slog.New(slog.NewTextHandler(io.Discard, nil)))
	})
}

// clonePeerDB creates <template>_<suffix> as a copy of template's files
// (STRATEGY FILE_COPY: a copy of the directory, no WAL per page).
func (r *runner) clonePeerDB(ctx context.Context, template *peerDB, suffix string) (*peerDB, error) {
	return r.newPeerDB(ctx, template.name+"_"+suffix, template.name, nil)
}

// newPeerDB creates database name (a copy of template, unless empty), runs
// init on it and connects a pool. The database is returned also when init
// fails, for the caller to drop.
func (r *runner) newPeerDB(ctx context.Context, name, template string, init func(*peerDB) error) (*peerDB, error) {
	admin, err := pgx.Connect(ctx, r.env.endpoints.AdminDSN)
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	stmt := fmt.Sprintf("CREATE DATABASE %s OWNER eventforge", pgx.Identifier{name}.Sanitize())
	if template != "" {
		stmt += fmt.Sprintf(" TEMPLATE %s STRATEGY FILE_COPY", pgx.Identifier{template}.Sanitize())
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		return nil, fmt.Errorf("creating %s: %w", name, err)
	}
	u, err := url.Parse(r.env.dsn)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	db := &peerDB{name: name, dsn: u.String(), kafka: r.env.endpoints.KafkaBootstrap}
	if init != nil {
		if err := init(db); err != nil {
			return db, err
		}
	}
	db.pool, err = pgxpool.New(ctx, db.dsn)
	return db, err
}

// dropPeerDB drops the database and its replication slots, unless the run
// keeps what it created.
func (r *runner) dropPeerDB(ctx context.Context, db *peerDB) {
	if db.pool != nil {
		db.pool.Close()
		db.pool = nil
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

// dropSlot drops a run's slot once the walsender of its stopped relay let
// go of it, so it retains no WAL for the runs after it.
func (r *runner) dropSlot(ctx context.Context, db *peerDB, slot string) {
	ctx = context.WithoutCancel(ctx)
	err := waitFor(ctx, 30*time.Second, "slot "+slot+" dropped", func() (bool, error) {
		return schema.DropSlotsIfExist(ctx, db.pool, slot) == nil, nil
	})
	if err != nil {
		r.logger.Warn("dropping peer slot", "slot", slot, "err", err)
	}
}
