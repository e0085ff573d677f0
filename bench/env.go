package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/schema"
)

// env is the benchmark's own database, slot, topic and group on the local
// stack, so a run never disturbs `make run` data.
type env struct {
	endpoints localstack.Endpoints
	database  string
	dsn       string
	slot      string
	topic     string
	group     string
	pool      *pgxpool.Pool
}

func newEnv(ctx context.Context, cfg Config, stamp string, logger *slog.Logger) (*env, error) {
	res, err := localstack.Up(ctx, localstack.Config{StateDir: cfg.StateDir}, logger)
	if err != nil {
		return nil, err
	}
	id := "bench_" + strings.ToLower(stamp)
	e := &env{endpoints: res.Endpoints, database: id, slot: id, topic: id + ".orders", group: id + "-fulfillment"}
	admin, err := pgx.Connect(ctx, res.AdminDSN)
	if err != nil {
		return nil, fmt.Errorf("connecting as admin: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER eventforge", pgx.Identifier{id}.Sanitize())); err != nil {
		return nil, fmt.Errorf("creating database %s: %w", id, err)
	}
	u, err := url.Parse(res.PostgresDSN)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + id
	e.dsn = u.String()
	if err := schema.Migrate(ctx, e.dsn, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return nil, err
	}
	if e.pool, err = pgxpool.New(ctx, e.dsn); err != nil {
		return nil, err
	}
	if _, err := schema.EnsureSlot(ctx, e.pool, e.slot); err != nil {
		return nil, err
	}
	if err := e.createTopic(ctx, e.topic); err != nil {
		return nil, err
	}
	logger.Info("bench environment ready", "database", id, "slot", e.slot, "topic", e.topic)
	return e, nil
}

// createTopic creates the 6-partition topic with broker append timestamps,
// so a record's timestamp is when Kafka stored it (the ack time).
func (e *env) createTopic(ctx context.Context, topic string) error {
	return e.createTopicPartitions(ctx, topic, 6)
}

// createTopicPartitions is createTopic with partitions partitions.
func (e *env) createTopicPartitions(ctx context.Context, topic string, partitions int) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.endpoints.KafkaBootstrap, "broker.address.family": "v4"})
	if err != nil {
		return err
	}
	defer a.Close()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{
		Topic: topic, NumPartitions: partitions, ReplicationFactor: 1,
		Config: map[string]string{"message.timestamp.type": "LogAppendTime"},
	}}, kafka.SetAdminOperationTimeout(30*time.Second))
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	if code := res[0].Error.Code(); code != kafka.ErrNoError {
		return fmt.Errorf("creating topic %s: %w", topic, res[0].Error)
	}
	return nil
}

func (e *env) cleanup(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if e.pool != nil {
		e.pool.Close()
	}
	if a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.endpoints.KafkaBootstrap, "broker.address.family": "v4"}); err == nil {
		// The consumers create the dead-letter topic of what they consume.
		_, _ = a.DeleteTopics(ctx, []string{e.topic, e.topic + ".warmup", e.topic + ".dlq"})
		_, _ = a.DeleteConsumerGroups(ctx, []string{e.group + "-off", e.group + "-on"})
		a.Close()
	}
	admin, err := pgx.Connect(ctx, e.endpoints.AdminDSN)
	if err != nil {
		logger.Warn("bench cleanup", "err", err)
		return
	}
	defer admin.Close(ctx)
	for i := 0; i < 50; i++ {
		if err = schema.DropSlotsIfExist(ctx, admin, e.slot, recvlogicalSlot(e.slot)); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{e.database}.Sanitize())); err != nil {
		logger.Warn("bench cleanup", "err", err)
	}
}

// warmKafka produces n records of about the size of an order event to a
// scratch topic and waits for their acknowledgements, so that the drain
// measures the reader against a broker whose JVM has compiled its hot
// paths, as the pgbench phase has warmed PostgreSQL. The topic is deleted.
func (e *env) warmKafka(ctx context.Context, n int) error {
	topic := e.topic + ".warmup"
	if err := e.createTopic(ctx, topic); err != nil {
		return err
	}
	p, err := e.newBenchProducer()
	if err != nil {
		return err
	}
	defer p.Close()
	defer func() {
		if a, err := kafka.NewAdminClientFromProducer(p); err == nil {
			_, _ = a.DeleteTopics(context.WithoutCancel(ctx), []string{topic})
			a.Close()
		}
	}()
	value := []byte(strings.Repeat("x", 600))
	err = produceAll(ctx, p, n, func(i int) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key: []byte(fmt.Sprintf("k%d", i%1000)), Value: value}
	})
	if err != nil {
		return fmt.Errorf("warming kafka: %w", err)
	}
	return nil
}

// newBenchProducer is a producer with the reader's delivery settings
// (idempotent, acks=all, linger 1 ms, lz4) whose delivery reports carry no
// message fields.
func (e *env) newBenchProducer() (*kafka.Producer, error) {
	return kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": e.endpoints.KafkaBootstrap, "broker.address.family": "v4",
		"enable.idempotence": true, "acks": "all", "linger.ms": 1, "compression.type": "lz4", "go.delivery.report.fields": "none"})
}

// produceAll produces the n messages msg returns with p and waits for
// every delivery report; it returns the first delivery error.
func produceAll(ctx context.Context, p *kafka.Producer, n int, msg func(i int) *kafka.Message) error {
	acked := make(chan error, 1)
	go func() {
		var first error
		for done := 0; done < n; {
			if m, ok := (<-p.Events()).(*kafka.Message); ok {
				done++
				if m.TopicPartition.Error != nil && first == nil {
					first = m.TopicPartition.Error
				}
			}
		}
		acked <- first
	}()
	for i := 0; i < n; i++ {
		m := msg(i)
		for {
			err := p.Produce(m, nil)
			if err == nil {
				break
			}
			var kerr kafka.Error
			if !errors.As(err, &kerr) || kerr.Code() != kafka.ErrQueueFull {
				return err
			}
			p.Flush(10)
		}
	}
	select {
	case err := <-acked:
		return err
	case <-ctx.Done():
		return ctx.Err()
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
