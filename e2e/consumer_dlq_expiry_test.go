package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/verify"
)

// TestVerifyDeadLetterExpired: a consumer creates its DLQ topic with no
// retention (retention.ms -1). Two events no consumer knows are
// dead-lettered. The first is purged with `eventforge dlq purge`, which
// records it: verify passes. The second then disappears as an expiry would
// take it — its dead letter deleted from the DLQ without a purge record,
// and its source record deleted from the order topic by that topic's own
// retention — and verify, which then finds the event nowhere else, reports
// the dead letter lost.
func TestVerifyDeadLetterExpired(t *testing.T) {
	pl := newPipeline(t)
	dlqTopic := dlqTopicOf(t, pl)
	ep := newEventProducer(t, pl)
	consumerProc(t, pl, "fulfillment", "fulfillment", pl.env.Group, nil)
	audit := func(t *testing.T) (verify.Report, int) {
		t.Helper()
		return runVerifyArgs(t, pl, "--consumer", "fulfillment="+pl.env.Group)
	}
	settings := topicSettings(t, pl, dlqTopic)
	if settings["retention.ms"] != "-1" || settings["retention.bytes"] != "-1" || settings["cleanup.policy"] != "delete" {
		t.Fatalf("%s created with %v; want no retention", dlqTopic, settings)
	}
	t.Logf("%s: retention.ms=%s retention.bytes=%s cleanup.policy=%s", dlqTopic, settings["retention.ms"], settings["retention.bytes"], settings["cleanup.policy"])

	deadLetter := func(key string) {
		t.Helper()
		ev := orderEvent{id: uuid.NewString(), typ: "OrderShipped", key: key, payload: []byte(`{}`), partition: 0}
		before := len(readDLQEntries(t, pl, dlqTopic))
		ep.send(t, ev)
		testenv.Eventually(t, 60*time.Second, "dead letter of "+key, func() error {
			if n := len(readDLQEntries(t, pl, dlqTopic)); n != before+1 {
				return fmt.Errorf("DLQ holds %d records, want %d", n, before+1)
			}
			return nil
		})
		waitGroupAtEnd(t, pl, pl.env.Group, 60*time.Second)
	}

	deadLetter(uuid.NewString())
	eventforge(t, 0, "dlq", "purge", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", dlqTopic,
		"--database-url", pl.env.DatabaseURL, "--all", "--yes")
	if rep, code := audit(t); code != 0 || rep.Purged["fulfillment"] != 1 || rep.DeadLettersLost != 0 {
		t.Fatalf("purged dead letter: exit %d, purged %v, dead letters lost %d, violations %v; want exit 0, one purged",
			code, rep.Purged, rep.DeadLettersLost, rep.Violations)
	}

	deadLetter(uuid.NewString())
	if rep, code := audit(t); code != 0 || rep.DeadLettered["fulfillment"] != 1 {
		t.Fatalf("dead letter held: exit %d, dead-lettered %v, violations %v", code, rep.DeadLettered, rep.Violations)
	}
	deleteRecordsToEnd(t, pl, dlqTopic)
	deleteRecordsToEnd(t, pl, pl.env.Topic)
	rep, code := audit(t)
	if code != 1 || rep.DeadLettersLost != 1 || !mentions(rep, "left the DLQ without a purge record") {
		t.Fatalf("expired dead letter: exit %d, dead letters lost %d, lost %d, violations %v; want exit 1 and one dead letter lost",
			code, rep.DeadLettersLost, rep.Lost, rep.Violations)
	}
	t.Logf("verify after the expiry: %s", strings.Join(rep.Violations, "; "))
}

// topicSettings reads the settings of topic.
func topicSettings(t *testing.T, pl *pipeline, topic string) map[string]string {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": pl.env.Endpoints.KafkaBootstrap, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out map[string]string
	testenv.Eventually(t, 30*time.Second, "settings of "+topic, func() error {
		res, err := a.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic}})
		if err != nil {
			return err
		}
		if res[0].Error.Code() != kafka.ErrNoError {
			return res[0].Error
		}
		out = map[string]string{}
		for k, e := range res[0].Config {
			out[k] = e.Value
		}
		return nil
	})
	return out
}

// deleteRecordsToEnd deletes every record of topic, as retention deletes
// expired ones (the low watermark moves up).
func deleteRecordsToEnd(t *testing.T, pl *pipeline, topic string) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": pl.env.Endpoints.KafkaBootstrap, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tps []kafka.TopicPartition
	for p := range int32(6) {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.OffsetEnd})
	}
	res, err := a.DeleteRecords(ctx, tps)
	if err != nil {
		t.Fatalf("deleting the records of %s: %v", topic, err)
	}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			t.Fatalf("deleting the records of %s[%d]: %v", topic, r.TopicPartition.Partition, r.TopicPartition.Error)
		}
	}
}
