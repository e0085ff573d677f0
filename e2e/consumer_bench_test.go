package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkConsumerBacklog measures the fulfillment consumer alone (one
// process, default 4 workers over 6 partitions) draining a backlog of
// OrderCreated events produced straight to its topic, with batching off
// (--batch-size 1) and on (--batch-size 100). Run it with
//
//	go test -run '^$' -bench BenchmarkConsumerBacklog -benchtime 1x ./e2e/
//
// EVENTFORGE_BENCH_EVENTS overrides the backlog size (default 100000).
// Reported: events/s from process start to the last offset commit, and
// events/s between the first and the last apply transaction.
func BenchmarkConsumerBacklog(b *testing.B) {
	n := 100_000
	if s := os.Getenv("EVENTFORGE_BENCH_EVENTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("EVENTFORGE_BENCH_EVENTS=%q", s)
		}
		n = v
	}
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			for range b.N {
				backlogRun(b, n, batch)
			}
		})
	}
}

func backlogRun(b *testing.B, n, batch int) {
	b.StopTimer()
	pl := newPipeline(b)
	dlqTopicOf(b, pl)
	orders := seedOrders(b, pl, n, 100)
	ep := newEventProducer(b, pl)
	for i := 0; i < n; i += 5000 {
		evs := make([]orderEvent, 0, 5000)
		for _, o := range orders[i:min(i+5000, n)] {
			evs = append(evs, createdEvent(o))
		}
		ep.send(b, evs...)
	}
	b.StartTimer()
	began := time.Now()
	p, _ := consumerProc(b, pl, "fulfillment", "fulfillment", pl.env.Group, nil, "--batch-size", strconv.Itoa(batch))
	waitGroupAtEnd(b, pl, pl.env.Group, 30*time.Minute)
	elapsed := time.Since(began)
	b.StopTimer()
	p.stop()

	if m := marks(b, pl, "fulfillment"); m != n {
		b.Fatalf("%d marks, want %d", m, n)
	}
	var shipments int
	var window float64
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM shipments),
		(SELECT extract(epoch FROM max(processed_at) - min(processed_at)) FROM processed_events)`).Scan(&shipments, &window); err != nil {
		b.Fatal(err)
	}
	if shipments != n {
		b.Fatalf("%d shipments, want %d", shipments, n)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	if window > 0 {
		b.ReportMetric(float64(n)/window, "apply-events/s")
	}
	b.Logf("batch-size %d: %d events in %s (%.0f events/s from start; apply window %.1fs)", batch, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), window)
}
