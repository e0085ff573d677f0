package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
)

// produceDLQ writes n dead letters of env.Topic into topic, partition
// i%parts, and returns their event IDs in the order written.
func produceDLQ(t *testing.T, env *testenv.Env, topic string, n, parts int) []string {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": env.Endpoints.KafkaBootstrap, "acks": "all", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	delivered := make(chan kafka.Event, n)
	var ids []string
	for i := range n {
		id := fmt.Sprintf("0195f5a8-0000-7000-8000-%012d", i)
		ids = append(ids, id)
		src := env.Topic
		m := Record(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &src, Partition: int32(i % 6), Offset: kafka.Offset(i)},
			Key: []byte(fmt.Sprintf("order-%d", i)), Value: []byte(`{}`),
			Headers: []kafka.Header{{Key: contract.HeaderID, Value: []byte(id)}, {Key: contract.HeaderType, Value: []byte(contract.TypeOrderCreated)}}},
			topic, Failure{Consumer: "fulfillment", Class: "not_found", Message: "order not found", Attempts: 5})
		m.TopicPartition.Partition = int32(i % parts)
		if err := p.Produce(m, delivered); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if m := (<-delivered).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	}
	return ids
}

// TestScanAndReadAt: Scan gives every record held, partition by
// partition in offset order; ReadAt reads one position and reports one
// that holds nothing.
func TestScanAndReadAt(t *testing.T) {
	env := testenv.New(t)
	topic := env.Topic // a 6-partition topic of the test's own, holding dead letters here
	produceDLQ(t, env, topic, 30, 3)
	c, err := NewReader(env.Endpoints.KafkaBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	err = Scan(ctx, c, topic, func(e Entry) error {
		got = append(got, fmt.Sprintf("%d:%d", e.Partition, e.Offset))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for p := range 3 {
		for o := range 10 {
			want = append(want, fmt.Sprintf("%d:%d", p, o))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("scanned %v, want %v", got, want)
	}
	e, err := ReadAt(ctx, c, topic, 1, 4)
	if err != nil || e.Partition != 1 || e.Offset != 4 || e.Consumer != "fulfillment" || e.OriginalTopic != env.Topic {
		t.Fatalf("ReadAt 1:4 = %+v, %v", e, err)
	}
	if _, err := ReadAt(ctx, c, topic, 1, 10); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("ReadAt past the end: %v, want ErrNoRecord", err)
	}
}

// TestReplayerReportsEachEntry: of five entries, three replay to an
// existing topic, one has no original topic and one names a topic that
// does not exist. Each gets its own outcome, in any order: the three are
// acknowledged and readable in the original topic with their event IDs,
// the other two fail with their own position; one failure does not stop
// the others.
func TestReplayerReportsEachEntry(t *testing.T) {
	env := testenv.New(t)
	dlqTopic := env.Topic + DefaultSuffix
	if err := localstack.EnsureTopics(context.Background(), env.Endpoints.KafkaBootstrap, []localstack.TopicSpec{{Name: dlqTopic, Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.DeleteTopics(env.Endpoints.KafkaBootstrap, dlqTopic) })
	ids := produceDLQ(t, env, dlqTopic, 5, 1)
	c, err := NewReader(env.Endpoints.KafkaBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	es, err := Read(ctx, c, dlqTopic)
	if err != nil || len(es) != 5 {
		t.Fatalf("read %d entries, %v", len(es), err)
	}
	es[3].OriginalTopic = ""
	es[4].OriginalTopic = env.Topic + ".missing"

	p, err := NewProducer(ReplayConfig(env.Endpoints.KafkaBootstrap), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	results := map[int64]error{}
	rp := NewReplayer(p, time.Now(), func(r Result) {
		if _, dup := results[r.Offset]; dup {
			t.Errorf("two results for %s", r.Position())
		}
		results[r.Offset] = r.Err
	})
	for _, e := range es {
		if err := rp.Add(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := rp.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(results) != 5 {
		t.Fatalf("%d results, want 5: %v", len(results), results)
	}
	for off, err := range results {
		if (off >= 3) != (err != nil) {
			t.Errorf("entry %d: result %v; want a failure for 3 and 4 only", off, err)
		}
	}
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	var replayed []string
	for _, r := range recs {
		replayed = append(replayed, r.Headers[contract.HeaderID])
	}
	slices.Sort(replayed)
	if !slices.Equal(replayed, ids[:3]) {
		t.Errorf("original topic holds %v, want the replays of %v", replayed, ids[:3])
	}
}
