package engine

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestDLQTopicCannotExpire: a consumer starting on a source topic creates
// its DLQ topic so that dead letters never expire (no time or size
// retention, no compaction, room for the dlq.* headers above the source's
// record limit); an existing DLQ topic with the broker's 24 h retention is
// altered to the same settings before anything is dead-lettered into it.
func TestDLQTopicCannotExpire(t *testing.T) {
	for _, tt := range []struct {
		name     string
		existing map[string]string // settings of a DLQ topic created before the consumer starts; nil: none
	}{
		{"fresh topic", nil},
		{"existing topic with a 24 h retention", map[string]string{"retention.ms": "86400000", "cleanup.policy": "compact,delete"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := testenv.New(t)
			topic := dlq.Topic(env.Topic, "")
			a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": env.Endpoints.KafkaBootstrap, "log_level": 3})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if tt.existing != nil {
				res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: 6, ReplicationFactor: 1, Config: tt.existing}})
				if err != nil || res[0].Error.Code() != kafka.ErrNoError {
					t.Fatalf("creating %s: %v %v", topic, err, res)
				}
				t.Cleanup(func() { deleteTopic(t, env.Endpoints.KafkaBootstrap, topic) })
			}
			start(t, env, Settings{}, fakeHandler{})
			testenv.Eventually(t, 30*time.Second, "dlq topic settings", func() error {
				got, err := dlq.ReadSettings(ctx, a, topic, env.Topic)
				if err != nil {
					return err
				}
				for k, v := range dlq.TopicSettings {
					if got[topic][k] != v {
						return fmt.Errorf("%s %s=%s, want %s", topic, k, got[topic][k], v)
					}
				}
				if e := dlq.Expiry(got[topic]); e != nil {
					return fmt.Errorf("%s lets records expire: %v", topic, e)
				}
				src, err1 := strconv.Atoi(got[env.Topic]["max.message.bytes"])
				dst, err2 := strconv.Atoi(got[topic]["max.message.bytes"])
				if err1 != nil || err2 != nil {
					return fmt.Errorf("max.message.bytes of %s and %s: %v, %v", env.Topic, topic, err1, err2)
				}
				if dst < src+dlq.MessageHeadroom {
					return fmt.Errorf("%s max.message.bytes %d, want at least %d + %d", topic, dst, src, dlq.MessageHeadroom)
				}
				t.Logf("%s: retention.ms=%s retention.bytes=%s cleanup.policy=%s max.message.bytes=%d (source %d)",
					topic, got[topic]["retention.ms"], got[topic]["retention.bytes"], got[topic]["cleanup.policy"], dst, src)
				return nil
			})
		})
	}
}

// TestDLQTopicDeletedPartitionWaits: the DLQ topic is deleted while the
// consumer runs, and a record of partition 0 must be dead-lettered. The
// write fails, the partition waits as unavailable with the cause
// topic_missing (nothing is committed past the record), the other
// partitions keep applying; once the topic is back, the record is
// dead-lettered once, the partition goes on, and every other record is
// applied once.
func TestDLQTopicDeletedPartitionWaits(t *testing.T) {
	env := testenv.New(t)
	topic := dlq.Topic(env.Topic, "")
	h := start(t, env, Settings{BatchSize: 10}, fakeHandler{})
	testenv.Eventually(t, 30*time.Second, "dlq topic created", func() error {
		_, err := dlqSettings(t, env, topic)
		return err
	})
	deleteTopic(t, env.Endpoints.KafkaBootstrap, topic)
	testenv.Eventually(t, 30*time.Second, "dlq topic deleted", func() error {
		if _, err := dlqSettings(t, env, topic); err == nil {
			return fmt.Errorf("%s still exists", topic)
		}
		return nil
	})

	var recs []record
	for i := range 24 {
		recs = append(recs, record{partition: int32(i % 6), key: fmt.Sprintf("k%02d", i), id: uuid.New(), payload: fmt.Sprint(i)})
	}
	poison := record{partition: 0, key: "poison", id: uuid.New(), payload: "poison"}
	produce(t, env.Endpoints.KafkaBootstrap, env.Topic, append([]record{poison}, recs...))
	gauge := dlqUnavailablePartitions.WithLabelValues(h.name, CauseTopicMissing)
	testenv.Eventually(t, 2*time.Minute, "partition 0 waiting on the missing dlq topic", func() error {
		if g := gaugeValue(gauge); g != 1 {
			return fmt.Errorf("%v partitions waiting with cause %s, want 1", g, CauseTopicMissing)
		}
		return nil
	})
	effects := h.effects(t)
	for _, r := range recs {
		want := 1
		if r.partition == 0 {
			want = 0 // behind the record that waits
		}
		if len(effects[r.key]) != want {
			t.Errorf("record %s of partition %d applied %d times while the dlq topic was missing, want %d", r.key, r.partition, len(effects[r.key]), want)
		}
	}

	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": env.Endpoints.KafkaBootstrap, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := dlq.EnsureTopics(ctx, a, []string{env.Topic}, ""); err != nil {
		t.Fatalf("recreating %s: %v", topic, err)
	}
	h.waitCommitted(t)
	effects = h.effects(t)
	for _, r := range recs {
		if len(effects[r.key]) != 1 {
			t.Errorf("record %s applied %d times, want once", r.key, len(effects[r.key]))
		}
	}
	if es := readDLQ(t, env); len(es) != 1 || es[0].EventID != poison.id.String() {
		t.Errorf("DLQ holds %+v, want the poison record once", es)
	}
	if g := gaugeValue(gauge); g != 0 {
		t.Errorf("%v partitions still waiting on the dlq after it came back", g)
	}
}

// dlqSettings reads the settings of topic.
func dlqSettings(t *testing.T, env *testenv.Env, topic string) (map[string]string, error) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": env.Endpoints.KafkaBootstrap, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := dlq.ReadSettings(ctx, a, topic)
	if err != nil {
		return nil, err
	}
	return got[topic], nil
}
