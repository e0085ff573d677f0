package e2e

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
)

// largeDLQ is the size of the DLQ the streaming tools are run on.
const largeDLQ = 50_000

// TestDLQToolsStreamALargeDLQ: `eventforge dlq` lists, replays and purges a
// DLQ topic of 50,000 dead letters (1 KiB payloads) of the test's own,
// reading it one record at a time. One dead letter in the middle of
// partition 0 names an original topic that does not exist: the replay
// reports it as not replayed (and logs no "replayed" line for it), exits
// non-zero, and prints a purge of what was replayed only. That purge, and
// a purge after a new dead letter arrived, delete every replayed record
// and keep the one that failed, the records behind it in its partition,
// and the newcomer. (docs/dlq.md has the commands' peak resident size.)
func TestDLQToolsStreamALargeDLQ(t *testing.T) {
	env := testenv.New(t)
	topic := dlq.Topic(env.Topic, "")
	ctx := context.Background()
	if err := localstack.EnsureTopics(ctx, env.Endpoints.KafkaBootstrap, []localstack.TopicSpec{{Name: topic, Partitions: 6}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.DeleteTopics(env.Endpoints.KafkaBootstrap, topic) })
	const badIndex = 6 * 100 // partition 0, offset 100
	produceDeadLetters(t, env, topic, 0, largeDLQ, badIndex)
	brokers := []string{"--kafka-brokers", env.Endpoints.KafkaBootstrap, "--topic", topic}

	out := eventforge(t, 0, append([]string{"dlq", "list", "--limit", "5"}, brokers...)...).Stdout
	if want := fmt.Sprintf("%s: %d records held, %d match", topic, largeDLQ, largeDLQ); !strings.Contains(out, want) {
		t.Fatalf("dlq list printed\n%s\nwant %q", out, want)
	}
	if !strings.Contains(out, fmt.Sprintf("… %d more (raise --limit)", largeDLQ-5)) {
		t.Errorf("dlq list --limit 5 printed\n%s", out)
	}

	replay := eventforge(t, 1, append([]string{"dlq", "replay", "--all"}, brokers...)...)
	out, logs := replay.Stdout, replay.Stderr
	if want := fmt.Sprintf("replayed %d of %d events; 1 failed", largeDLQ-1, largeDLQ); !strings.Contains(out, want) {
		t.Fatalf("dlq replay printed\n%s\nwant %q", out, want)
	}
	badPos := fmt.Sprintf("%s/0/%d", topic, badIndex/6)
	if !strings.Contains(out, fmt.Sprintf("not replayed: 0:%d", badIndex/6)) {
		t.Errorf("dlq replay does not name the entry it could not replay:\n%s", out)
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"dlq_position":"`+badPos+`"`) && strings.Contains(l, `"msg":"replayed"`) {
			t.Errorf("the entry that was not replayed is logged as replayed: %s", l)
		}
	}
	if n := countReplays(t, env); n != largeDLQ-1 {
		t.Errorf("the original topic holds %d replays, want %d", n, largeDLQ-1)
	}
	m := regexp.MustCompile(`eventforge dlq purge --topic \S+ (.*) --yes`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dlq replay printed no purge of what it replayed:\n%s", out)
	}
	if want := fmt.Sprintf("--through 0:%d ", badIndex/6-1); !strings.Contains(m[1]+" ", want) {
		t.Errorf("purge of what was replayed is %q; want partition 0 through the record before the failed one (%s)", m[1], want)
	}

	// A dead letter arrives after the replay: a purge of what was
	// replayed keeps it.
	produceDeadLetters(t, env, topic, largeDLQ, 1, -1)
	purge := append(append([]string{"dlq", "purge"}, brokers...), "--database-url", env.DatabaseURL, "--yes")
	purge = append(purge, strings.Fields(m[1])...)
	eventforge(t, 0, purge...)

	kept := (largeDLQ+5)/6 - badIndex/6 + 1 // partition 0 from the failed entry on, and the newcomer
	c, err := dlq.NewReader(env.Endpoints.KafkaBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	es, err := dlq.Read(ctx, c, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != kept || es[0].Partition != 0 || es[0].Offset != int64(badIndex/6) {
		t.Fatalf("DLQ holds %d records after the purge (first %s), want %d from %s", len(es), es[0].Position(), kept, badPos)
	}
	var purged int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM dlq_purged WHERE dlq_topic = $1`, topic).Scan(&purged); err != nil {
		t.Fatal(err)
	}
	if purged != largeDLQ+1-kept {
		t.Errorf("dlq_purged holds %d records, want %d", purged, largeDLQ+1-kept)
	}
	// Purge says what it deletes: nothing without a selection (a usage
	// error).
	stderr := eventforge(t, 2, append(append([]string{"dlq", "purge"}, brokers...), "--database-url", env.DatabaseURL, "--yes")...).Stderr
	if !strings.Contains(stderr, "say what to purge") {
		t.Errorf("purge without a selection: %s", stderr)
	}
}

// produceDeadLetters writes n dead letters of env.Topic, numbered from
// first, into topic, partition i%6, each with a 1 KiB payload; the one
// numbered bad names an original topic that does not exist.
func produceDeadLetters(t *testing.T, env *testenv.Env, topic string, first, n, bad int) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": env.Endpoints.KafkaBootstrap, "acks": "all", "linger.ms": 20,
		"go.delivery.reports": true, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	value := []byte(`{"payload":"` + strings.Repeat("x", 1000) + `"}`)
	delivered := make(chan kafka.Event, 10_000)
	done := make(chan error, 1)
	go func() {
		var firstErr error
		for range n {
			if m := (<-delivered).(*kafka.Message); m.TopicPartition.Error != nil && firstErr == nil {
				firstErr = m.TopicPartition.Error
			}
		}
		done <- firstErr
	}()
	for i := first; i < first+n; i++ {
		src := env.Topic
		if i == bad {
			src = env.Topic + ".gone"
		}
		id := fmt.Sprintf("0195f5a8-0000-7000-8000-%012d", i)
		rec := dlq.Record(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &src, Partition: int32(i % 6), Offset: kafka.Offset(i)},
			Key: []byte(fmt.Sprintf("order-%d", i)), Value: value,
			Headers: []kafka.Header{{Key: contract.HeaderID, Value: []byte(id)}, {Key: contract.HeaderType, Value: []byte(contract.TypeOrderCreated)}}},
			topic, dlq.Failure{Consumer: "fulfillment", Class: "not_found", Message: "order not found", Attempts: 5,
				FirstFailedAt: time.Now(), LastFailedAt: time.Now()})
		rec.TopicPartition.Partition = int32(i % 6)
		for {
			err := p.Produce(rec, delivered)
			if kerr := (kafka.Error{}); errors.As(err, &kerr) && kerr.Code() == kafka.ErrQueueFull {
				p.Flush(100)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// countReplays counts the records of env.Topic that carry a replay header.
func countReplays(t *testing.T, env *testenv.Env) int {
	t.Helper()
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Headers[dlq.HeaderReplaySource] != "" {
			n++
		}
	}
	return n
}
