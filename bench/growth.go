package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/internal/kafkaread"
	"github.com/eventforge/eventforge/schema"
)

// growthResult is how the reader's and the consumer's costs grow with the
// work: the drain of ever larger backlogs, and the apply rate over a grid of
// partitions × workers.
type growthResult struct {
	Drains []growthDrain `json:"drains"`
	Apply  []growthApply `json:"apply"`
}

// growthDrain is one drain of a backlog of Events events by the reader.
type growthDrain struct {
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
}

// growthApply is one consumer applying Events events of a topic of
// Partitions partitions with Workers workers (batching on).
type growthApply struct {
	Partitions   int     `json:"partitions"`
	Workers      int     `json:"workers"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
}

// growthPhase drains backlogs of each size of the growth sizes, each on a
// slot of its own created just before its backlog is committed. After the
// drain of growthApplyEvents it copies that drain's records into topics of
// 1, 2, 4 and 8 partitions and times the consumer over each with 1, 2, 4
// and 8 workers (no more workers than partitions: a partition is applied by
// one worker at a time).
func (r *runner) growthPhase(ctx context.Context) error {
	g := &growthResult{}
	r.res.Growth = g
	topic := r.env.topic + ".growth"
	if err := r.env.createTopic(ctx, topic); err != nil {
		return err
	}
	defer r.env.deleteTopics(topic)
	applied := false
	for _, n := range r.sz.growthBacklogs {
		from, err := r.endOffsets(ctx, topic)
		if err != nil {
			return err
		}
		d, err := r.growthDrain(ctx, n, topic)
		if err != nil {
			return fmt.Errorf("draining a backlog of %d: %w", n, err)
		}
		g.Drains = append(g.Drains, d)
		if n == r.sz.growthApplyEvents {
			// The grid applies this drain's records, before a larger
			// drain adds its own to the topic.
			if err := r.growthApplyGrid(ctx, topic, from); err != nil {
				return err
			}
			applied = true
		}
	}
	if !applied {
		return fmt.Errorf("no drain of %d events to apply", r.sz.growthApplyEvents)
	}
	return nil
}

// growthDrain commits n order transactions behind a new slot, then times
// the reader from its start until the slot confirmed them, and stops it.
func (r *runner) growthDrain(ctx context.Context, n int, topic string) (growthDrain, error) {
	slot := r.env.slot + "_g" + strconv.Itoa(n)
	if _, err := schema.EnsureSlot(ctx, r.env.pool, slot); err != nil {
		return growthDrain{}, err
	}
	defer func() {
		admin, err := pgx.Connect(context.WithoutCancel(ctx), r.env.endpoints.AdminDSN)
		if err == nil {
			_ = schema.DropSlotsIfExist(context.WithoutCancel(ctx), admin, slot)
			admin.Close(context.WithoutCancel(ctx))
		}
	}()
	if err := commitOrders(ctx, r.env.dsn, r.logDir, n); err != nil {
		return growthDrain{}, err
	}
	if err := r.settle(ctx); err != nil {
		return growthDrain{}, err
	}
	target, err := r.currentWAL(ctx)
	if err != nil {
		return growthDrain{}, err
	}
	start, done := time.Now(), r.cpuFrom("growth: cdc drain of "+strconv.Itoa(n))
	c, err := startChild(r.binary, r.logDir, "cdc-growth-"+strconv.Itoa(n), false, "cdc", "--database-url", r.env.dsn,
		"--kafka-brokers", r.env.endpoints.KafkaBootstrap, "--slot", slot, "--topic", "order="+topic, "--log-level", "warn")
	if err != nil {
		return growthDrain{}, err
	}
	defer c.stop()
	err = waitFor(ctx, 30*time.Minute, "slot "+slot+" confirmed the backlog", func() (bool, error) {
		if !c.Running() {
			return false, fmt.Errorf("cdc exited; see %s", c.Log)
		}
		st, err := schema.ReadSlotStatus(ctx, r.env.pool, slot)
		if err != nil {
			return false, nil
		}
		confirmed, err := pglogrepl.ParseLSN(st.ConfirmedFlushLSN)
		return err == nil && confirmed >= target, nil
	})
	secs := time.Since(start).Seconds()
	done()
	if err != nil {
		return growthDrain{}, err
	}
	u, err := c.sample()
	if err != nil {
		return growthDrain{}, err
	}
	return growthDrain{Events: n, Seconds: secs, EventsPerSec: float64(n) / secs, PeakRSSBytes: u.PeakRSSBytes}, nil
}

// growthApplyGrid copies the records of topic from offsets from on into a
// topic per partition count and times a consumer over each with each worker
// count, resetting the business state between runs.
func (r *runner) growthApplyGrid(ctx context.Context, topic string, from map[int32]int64) error {
	kr, err := kafkaread.New(r.env.endpoints.KafkaBootstrap)
	if err != nil {
		return err
	}
	recs, err := kr.ReadFrom(ctx, topic, from)
	kr.Close()
	if err != nil {
		return err
	}
	for _, parts := range r.sz.growthPartitions {
		pt := fmt.Sprintf("%s.p%d", topic, parts)
		if err := r.env.createTopicPartitions(ctx, pt, parts); err != nil {
			return err
		}
		if err := r.copyRecords(ctx, recs, pt); err != nil {
			r.env.deleteTopics(pt, pt+".dlq")
			return err
		}
		for _, workers := range r.sz.growthPartitions {
			if workers > parts {
				break
			}
			run, err := r.growthApplyRun(ctx, pt, parts, workers)
			if err != nil {
				r.env.deleteTopics(pt, pt+".dlq")
				return err
			}
			r.res.Growth.Apply = append(r.res.Growth.Apply, run)
		}
		r.env.deleteTopics(pt, pt+".dlq")
	}
	return nil
}

// growthApplyRun resets the business state, then times one consumer group
// with workers workers over the whole of topic.
func (r *runner) growthApplyRun(ctx context.Context, topic string, parts, workers int) (growthApply, error) {
	// Every consumer's marks and business tables (consumer/registry).
	reset := "TRUNCATE " + strings.Join(append([]string{"processed_events"}, registry.Tables()...), ", ") +
		"; UPDATE orders SET status = 'created' WHERE status = 'processed'"
	if _, err := r.env.pool.Exec(ctx, reset); err != nil {
		return growthApply{}, fmt.Errorf("resetting business state: %w", err)
	}
	if err := r.settle(ctx); err != nil {
		return growthApply{}, err
	}
	ends, err := r.endOffsets(ctx, topic)
	if err != nil {
		return growthApply{}, err
	}
	kr, err := kafkaread.New(r.env.endpoints.KafkaBootstrap)
	if err != nil {
		return growthApply{}, err
	}
	defer kr.Close()
	total := 0
	for _, e := range ends {
		total += int(e)
	}
	group := fmt.Sprintf("%s-g%dx%d", r.env.group, parts, workers)
	defer r.env.deleteGroups(group)
	start := time.Now()
	c, err := startChild(r.binary, r.logDir, fmt.Sprintf("consumer-growth-%dx%d", parts, workers), false, "consumer",
		"--database-url", r.env.dsn, "--kafka-brokers", r.env.endpoints.KafkaBootstrap, "--group", group, "--topics", topic,
		"--workers", strconv.Itoa(workers), "--max-conns", strconv.Itoa(workers+1), "--batch-size", strconv.Itoa(r.sz.batchSize), "--commit-interval", "200ms", "--log-level", "warn")
	if err != nil {
		return growthApply{}, err
	}
	defer c.stop()
	err = waitCommitted(ctx, kr, c, group, topic, ends)
	secs := time.Since(start).Seconds()
	if err != nil {
		return growthApply{}, err
	}
	// Every record applied, none dead-lettered: the rate is of real work.
	var applied int
	if err := r.env.pool.QueryRow(ctx, `SELECT count(*) FROM processed_events`).Scan(&applied); err != nil {
		return growthApply{}, err
	}
	if applied != total {
		return growthApply{}, fmt.Errorf("%d partitions × %d workers: %d of %d events applied (see %s)", parts, workers, applied, total, c.Log)
	}
	return growthApply{Partitions: parts, Workers: workers, Events: total, Seconds: secs, EventsPerSec: float64(total) / secs}, nil
}

// copyRecords produces recs to topic with their keys, values and headers,
// partitioned by key as the reader partitions them, and waits for every
// acknowledgement.
func (r *runner) copyRecords(ctx context.Context, recs []kafkaread.Record, topic string) error {
	p, err := r.env.newBenchProducer()
	if err != nil {
		return err
	}
	defer p.Close()
	err = produceAll(ctx, p, len(recs), func(i int) *kafka.Message {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key: []byte(recs[i].Key), Value: recs[i].Value}
		for k, v := range recs[i].Headers {
			m.Headers = append(m.Headers, kafka.Header{Key: k, Value: []byte(v)})
		}
		return m
	})
	if err != nil {
		return fmt.Errorf("copying records to %s: %w", topic, err)
	}
	return nil
}

// endOffsets returns the end offset of each partition of topic, waiting
// for a topic just created to have a leader for every partition.
func (r *runner) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	kr, err := kafkaread.New(r.env.endpoints.KafkaBootstrap)
	if err != nil {
		return nil, err
	}
	defer kr.Close()
	var ends map[int32]int64
	var last error
	err = waitFor(ctx, 30*time.Second, "the end offsets of "+topic, func() (bool, error) {
		ends, last = kr.EndOffsets(topic)
		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w (last: %v)", err, last)
	}
	return ends, nil
}
