package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// peerWindow is one latency window of relay on db: the database settled
// (vacuum, checkpoint), a topic and, for a CDC relay, a slot of the
// window's own made at the end of the WAL (no backlog), the walsender
// probe and the read_committed reader started, then the relay; once it
// read the warm-up's orders (warmPeer), the rate is offered open loop for
// the warm-up at the rate and the window, and every order committed after
// the warm-up is measured: commit → walsender sent
// (the probe), → Kafka append (the record's broker time), → read by the
// reader. The relay is stopped and its slot and topic dropped after.
func (r *runner) peerWindow(ctx context.Context, relay peerRelay, db *peerDB, rate, round int) (relayLatency, error) {
	t := relay.Traits()
	lat := relayLatency{OfferedPerSec: rate, Round: round}
	run := newPeerRun(db, t, fmt.Sprintf("l%dr%d", rate, round))
	if err := settleDB(ctx, db.pool, r.env.endpoints.AdminDSN); err != nil {
		return lat, err
	}
	if err := r.env.createTopic(ctx, run.topic); err != nil {
		return lat, err
	}
	if !r.cfg.Keep {
		defer r.env.deleteTopics(run.topic)
	}
	probe, err := startWALProbe(ctx, db.dsn)
	if err != nil {
		return lat, err
	}
	defer probe.stop()
	if t.Slot {
		if _, err := db.pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, run.slot); err != nil {
			return lat, fmt.Errorf("creating slot %s: %w", run.slot, err)
		}
		defer r.dropSlot(ctx, db, run.slot)
	}
	tail, err := startTail(r.env.endpoints.KafkaBootstrap, run.topic, true)
	if err != nil {
		return lat, err
	}
	defer tail.close()
	since := time.Now()
	c, err := relay.Start(ctx, db, run, r.logDir)
	if err != nil {
		return lat, err
	}
	defer c.stop()
	if err := r.warmPeer(ctx, db, c, tail, probe, since); err != nil {
		return lat, err
	}
	w, err := r.offerPeerLoad(ctx, db, c, t.Name, fmt.Sprintf("%s at %d/s, round %d", t.Name, rate, round), rate)
	if err != nil {
		return lat, err
	}
	r.res.CPU = append(r.res.CPU, w.cores)
	lat.OtherCores = w.cores.Cores[cpuOther]
	if err := waitWindowRead(ctx, db, c, tail, probe, since); err != nil {
		return lat, err
	}
	u, err := c.sample()
	if err != nil {
		return lat, fmt.Errorf("sampling %s: %w", t.Name, err)
	}
	if err := windowLatencies(ctx, db, tail, probe, w.from, &lat); err != nil {
		return lat, err
	}
	if lat.Orders > 0 {
		lat.RelayCPUPer1000 = (u.CPU - w.relayCPU).Seconds() / float64(lat.Orders) * 1000
		lat.AchievedPerSec = float64(lat.Orders) / w.seconds
	}
	return lat, nil
}

// warmPeer commits one order and waits until the reader read its record
// (the relay is up and streaming: for Debezium, its JVM started), then
// commits the warm-up's orders at full speed and waits until the reader
// read them all: every relay has then done the same work, enough for a
// JVM's just-in-time compiler to have compiled its path per event, and
// holds nothing back when the load at the rate starts.
func (r *runner) warmPeer(ctx context.Context, db *peerDB, c *child, tail *tailReader, probe *walProbe, since time.Time) error {
	if _, err := pgbench(ctx, db.dsn, r.logDir, "-c", "1", "-t", "1"); err != nil {
		return fmt.Errorf("committing the first order: %w", err)
	}
	err := waitFor(ctx, 3*time.Minute, "the relay's first record read", func() (bool, error) {
		if !c.Running() {
			return false, fmt.Errorf("relay exited; see %s", c.Log)
		}
		n, err := tail.records()
		return n > 0, err
	})
	if err != nil {
		return err
	}
	if err := commitOrders(ctx, db.dsn, r.logDir, r.sz.peerWarmupOrders); err != nil {
		return fmt.Errorf("committing the warm-up's orders: %w", err)
	}
	return waitWindowRead(ctx, db, c, tail, probe, since)
}

// loadWindow is the measured part of one window's load.
type loadWindow struct {
	// from is the end of the warm-up: orders created from then on are
	// measured.
	from time.Time
	// seconds is from `from` to the end of the load.
	seconds float64
	// relayCPU is the relay's CPU time at from.
	relayCPU time.Duration
	// cores is where the machine's cores went from `from` to the end of
	// the load.
	cores phaseCPU
}

// offerPeerLoad offers rate orders per second to db with pgbench (open
// loop: -R schedules them as a Poisson process; 16 clients keep up with
// 2,000 transactions per second with room to spare) for the warm-up and
// the window, and samples the relay's CPU and the machine's (the relay's
// process in the group relay) at the end of the warm-up and of the load,
// the latter recorded under label.
func (r *runner) offerPeerLoad(ctx context.Context, db *peerDB, c *child, relay, label string, rate int) (loadWindow, error) {
	var w loadWindow
	pids := map[int]string{c.Cmd.Process.Pid: relay}
	var warm cpuSample
	warmed := make(chan struct{})
	timer := time.AfterFunc(r.sz.peerWarmup, func() {
		defer close(warmed)
		w.from, warm = time.Now(), sampleCPU(pids)
		if u, err := c.sample(); err == nil {
			w.relayCPU = u.CPU
		}
	})
	secs := int(math.Ceil((r.sz.peerWarmup + r.sz.peerDuration).Seconds()))
	_, err := pgbench(ctx, db.dsn, r.logDir, "-c", "16", "-R", strconv.Itoa(rate), "-T", strconv.Itoa(secs))
	if timer.Stop() {
		return w, fmt.Errorf("offering %d orders/s: the load ended within its warm-up (%s)", rate, r.sz.peerWarmup)
	}
	<-warmed
	end := sampleCPU(pids)
	w.seconds = end.at.Sub(w.from).Seconds()
	w.cores = coresBetween("peers: "+label, warm, end)
	if err != nil {
		return w, fmt.Errorf("offering %d orders/s: %w", rate, err)
	}
	return w, nil
}

// waitWindowRead waits until the reader read, and the probe saw sent,
// every order committed since the window started.
func waitWindowRead(ctx context.Context, db *peerDB, c *child, tail *tailReader, probe *walProbe, since time.Time) error {
	rows, err := db.pool.Query(ctx, `SELECT id::text FROM orders WHERE created_at >= $1`, since)
	if err != nil {
		return err
	}
	pending, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("reading the window's orders: %w", err)
	}
	committed := len(pending)
	return waitFor(ctx, 5*time.Minute, fmt.Sprintf("the window's %d orders read", committed), func() (bool, error) {
		if !c.Running() {
			return false, fmt.Errorf("relay exited with %d of %d orders unread; see %s", len(pending), committed, c.Log)
		}
		if _, err := tail.records(); err != nil {
			return false, err
		}
		if _, err := probe.orders(); err != nil {
			return false, err
		}
		left := pending[:0]
		for _, id := range pending {
			_, read := tail.record(id)
			_, sent := probe.sentAt(id)
			if !read || !sent {
				left = append(left, id)
			}
		}
		pending = left
		return len(pending) == 0, nil
	})
}

// windowLatencies measures every order created from `from` on: its
// created_at to the walsender's send, to its record's append and to its
// read, and how the p99 tails split at the send.
func windowLatencies(ctx context.Context, db *peerDB, tail *tailReader, probe *walProbe, from time.Time, lat *relayLatency) error {
	rows, err := db.pool.Query(ctx, `SELECT id::text, created_at FROM orders WHERE created_at >= $1`, from)
	if err != nil {
		return fmt.Errorf("reading order commit times: %w", err)
	}
	defer rows.Close()
	var toSent, toAppend, toRead []time.Duration
	missing := 0
	for rows.Next() {
		var id string
		var created time.Time
		if err := rows.Scan(&id, &created); err != nil {
			return err
		}
		rec, read := tail.record(id)
		sent, probed := probe.sentAt(id)
		if !read || !probed {
			missing++
			continue
		}
		toSent = append(toSent, sent.Sub(created))
		toAppend = append(toAppend, rec.appended.Sub(created))
		toRead = append(toRead, rec.read.Sub(created))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if missing > 0 {
		return fmt.Errorf("%d of the window's orders were not read or not seen sent", missing)
	}
	lat.Orders = len(toSent)
	// The shares pair the slices order by order: before latencies sorts them.
	lat.AppendTailBeforeSent = tailShareBefore(toAppend, toSent, 0.99)
	lat.ReadTailBeforeSent = tailShareBefore(toRead, toSent, 0.99)
	lat.CommitToSent, lat.CommitToAppend, lat.CommitToRead = latencies(toSent), latencies(toAppend), latencies(toRead)
	return nil
}
