package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/childproc"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

// endToEndPhase offers open-loop load at each rate with api, cdc and the
// consumer running, then measures commit → Kafka ack and commit → applied
// from durable timestamps: orders.created_at (set just before the order
// transaction), the record's broker append time, processed_events.processed_at.
func (r *runner) endToEndPhase(ctx context.Context) error {
	kr, err := kafkaread.New(r.env.endpoints.KafkaBootstrap)
	if err != nil {
		return err
	}
	defer kr.Close()
	fromOffsets, err := kr.EndOffsets(r.env.topic)
	if err != nil {
		return err
	}
	// One connection: HTTP/2 multiplexes the requests, and each further
	// connection added reader and writer wakeups on both sides.
	create, closeGRPC, err := grpcCreator(r.grpcAddr, 1)
	if err != nil {
		return err
	}
	defer closeGRPC()

	before := map[string]childproc.Usage{}
	for name, c := range map[string]*child{"api": r.api, "cdc": r.cdc, "consumer": r.consumer} {
		if before[name], err = c.sample(); err != nil {
			return fmt.Errorf("sampling %s: %w", name, err)
		}
	}
	e2eStart := time.Now()
	totalOrders := 0
	for _, rate := range r.sz.rates {
		rr, err := r.offerRate(ctx, create, rate)
		if err != nil {
			return err
		}
		r.res.EndToEnd = append(r.res.EndToEnd, rr)
		totalOrders += rr.Load.Requests
	}
	if err := r.componentUsage(before, totalOrders); err != nil {
		return err
	}

	// Broker append time of every record published during the phase.
	recs, err := kr.ReadFrom(ctx, r.env.topic, fromOffsets)
	if err != nil {
		return err
	}
	if err := r.endToEndLatencies(ctx, recs); err != nil {
		return err
	}

	// Throughput over time: orders created and applied per second.
	return r.throughput(ctx, e2eStart)
}

// offerRate offers open-loop load at rate for the rate's duration, profiling
// the components meanwhile, and waits until every order it created is
// applied; the slot's lag is sampled throughout.
func (r *runner) offerRate(ctx context.Context, create creator, rate int) (rateResult, error) {
	if err := r.settleSlot(ctx); err != nil {
		return rateResult{}, err
	}
	customer := fmt.Sprintf("bench-rate-%d", rate)
	var (
		maxLag  int64
		stop    = make(chan struct{})
		sampled sync.WaitGroup
	)
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, lag, err := r.slotLag(ctx); err == nil && lag > maxLag {
					maxLag = lag
				}
			}
		}
	}()
	var profiled []func()
	for _, c := range []*child{r.api, r.cdc, r.consumer} {
		profiled = append(profiled, c.profileCPU(r.logDir, "e2e-"+strconv.Itoa(rate), r.sz.rateDuration-time.Second))
	}
	done := r.cpuFrom(e2eWindowName(rate))
	load := openLoop(ctx, create, rate, r.sz.rateDuration, customer, 512)
	done()
	for _, wait := range profiled {
		wait()
	}
	err := waitFor(ctx, 5*time.Minute, "orders of rate "+strconv.Itoa(rate)+" applied", func() (bool, error) {
		var pending int
		err := r.env.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE customer_id = $1 AND status = 'created'`, customer).Scan(&pending)
		return err == nil && pending == 0, err
	})
	close(stop)
	sampled.Wait()
	if err != nil {
		return rateResult{}, err
	}
	return rateResult{OfferedPerSec: rate, Load: load, Orders: load.Requests, MaxSlotLagBytes: maxLag}, nil
}

// settleSlot settles the database before a rate, as before the first, and
// waits until the slot confirmed the WAL that wrote. Without it, the
// autovacuum that the earlier rates' inserts make due (once a table grew by
// a fifth since its last vacuum) runs inside whichever rate crosses that
// threshold and takes CPU from a machine that rate already keeps busy.
func (r *runner) settleSlot(ctx context.Context) error {
	if err := r.settle(ctx); err != nil {
		return err
	}
	target, err := r.currentWAL(ctx)
	if err != nil {
		return err
	}
	return waitFor(ctx, time.Minute, "slot confirmed the settled database", func() (bool, error) {
		confirmed, _, err := r.slotLag(ctx)
		return err == nil && confirmed >= target, nil
	})
}

// componentUsage records each component's peak memory and the CPU it used
// since before, per 1000 orders.
func (r *runner) componentUsage(before map[string]childproc.Usage, totalOrders int) error {
	for name, c := range map[string]*child{"api": r.api, "cdc": r.cdc, "consumer": r.consumer} {
		after, err := c.sample()
		if err != nil {
			return fmt.Errorf("sampling %s: %w", name, err)
		}
		cpu := (after.CPU - before[name].CPU).Seconds()
		cu := componentUsage{PeakRSSBytes: after.PeakRSSBytes, CPUSeconds: cpu}
		if totalOrders > 0 {
			cu.CPUSecondsPer1000 = cpu / float64(totalOrders) * 1000
		}
		r.res.Components[name] = cu
	}
	if len(r.res.EndToEnd) < 2 {
		return nil // one rate (--smoke): nothing to fit
	}
	fits, err := fitComponentCosts(r.res.EndToEnd, r.res.CPU, []string{"api", "cdc", "consumer"})
	if err != nil {
		return fmt.Errorf("fitting CPU against the rate: %w", err)
	}
	for name, f := range fits {
		cu := r.res.Components[name]
		cu.Fit = &f
		r.res.Components[name] = cu
	}
	return nil
}

// endToEndLatencies sets each rate's commit → Kafka ack latencies from the
// broker append times of recs, and commit → applied from the marks.
func (r *runner) endToEndLatencies(ctx context.Context, recs []kafkaread.Record) error {
	acked := make(map[string]time.Time, len(recs))
	for _, rec := range recs {
		id := rec.Headers[contract.HeaderID]
		if _, dup := acked[id]; !dup {
			acked[id] = rec.Timestamp
		}
	}
	for i := range r.res.EndToEnd {
		rr := &r.res.EndToEnd[i]
		customer := fmt.Sprintf("bench-rate-%d", rr.OfferedPerSec)
		rows, err := r.env.pool.Query(ctx, `SELECT ob.id::text, o.created_at, pe.processed_at
			FROM orders o JOIN outbox ob ON ob.aggregateid = o.id::text
			JOIN processed_events pe ON pe.event_id = ob.id AND pe.consumer = 'fulfillment'
			WHERE o.customer_id = $1`, customer)
		if err != nil {
			return err
		}
		var toAck, toApplied []time.Duration
		for rows.Next() {
			var id string
			var created, applied time.Time
			if err := rows.Scan(&id, &created, &applied); err != nil {
				rows.Close()
				return err
			}
			toApplied = append(toApplied, applied.Sub(created))
			if ts, ok := acked[id]; ok {
				toAck = append(toAck, ts.Sub(created))
			}
		}
		rows.Close()
		rr.CommitToAck, rr.CommitToApplied = latencies(toAck), latencies(toApplied)
	}

	return nil
}

// throughput records the orders created and applied per second since start.
func (r *runner) throughput(ctx context.Context, start time.Time) error {
	rows, err := r.env.pool.Query(ctx, `WITH e AS (
			SELECT o.created_at AS c, pe.processed_at AS a FROM orders o
			JOIN outbox ob ON ob.aggregateid = o.id::text
			LEFT JOIN processed_events pe ON pe.event_id = ob.id AND pe.consumer = 'fulfillment'
			WHERE o.customer_id LIKE 'bench-rate-%')
		SELECT s, sum(created)::int, sum(applied)::int FROM (
			SELECT floor(extract(epoch FROM c - $1::timestamptz))::int AS s, 1 AS created, 0 AS applied FROM e
			UNION ALL
			SELECT floor(extract(epoch FROM a - $1::timestamptz))::int, 0, 1 FROM e WHERE a IS NOT NULL) x
		GROUP BY s ORDER BY s`, start)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var p throughputPoint
		if err := rows.Scan(&p.Second, &p.Created, &p.Applied); err != nil {
			return err
		}
		r.res.Throughput = append(r.res.Throughput, p)
	}
	return rows.Err()
}
