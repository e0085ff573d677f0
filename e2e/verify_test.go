package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/verify"
)

// runVerify runs `eventforge verify --json` against the pipeline and returns
// the decoded report and the process exit code. The fulfillment consumer of
// the pipeline is always audited; more consumers are given as name=group.
func runVerify(t *testing.T, pl *pipeline, consumers ...string) (verify.Report, int) {
	t.Helper()
	return runVerifyWait(t, pl, "90s", consumers...)
}

// runVerifyWait is runVerify with its --wait: "0s" for scenarios where no
// relay runs (their events are produced straight to Kafka, so the slot never
// moves and the pipeline never counts as drained).
func runVerifyWait(t *testing.T, pl *pipeline, wait string, consumers ...string) (verify.Report, int) {
	t.Helper()
	args := []string{"--wait", wait, "--consumer", "fulfillment=" + pl.env.Group}
	for _, c := range consumers {
		args = append(args, "--consumer", c)
	}
	return runVerifyArgs(t, pl, args...)
}

// runVerifyArgs runs `eventforge verify --json` on the pipeline's database,
// topic and slot with the given flags (consumers, --wait, --grace), and
// returns the decoded report and the exit code.
func runVerifyArgs(t *testing.T, pl *pipeline, flags ...string) (verify.Report, int) {
	t.Helper()
	args := append([]string{"verify", "--json",
		"--database-url", pl.env.DatabaseURL, "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap,
		"--topic", pl.env.Topic, "--slot", pl.env.Slot}, flags...)
	if pl.env.ReplicationURL != "" {
		args = append(args, "--replication-url", pl.env.ReplicationURL)
	}
	res := eventforge(t, anyExit, args...)
	code := res.Code
	var rep verify.Report
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
		t.Fatalf("verify printed no JSON report (exit %d): %v\nstdout: %s\nstderr: %s", code, err, res.Stdout, res.Stderr)
	}
	return rep, code
}

// TestVerifyDetectsViolations: on a healthy pipeline the auditor reports no
// loss and no duplicate effect and exits 0; after one mark and its effect
// are deleted, or after a group's offset is committed past an event it never
// applied, it reports the loss and exits 1.
func TestVerifyDetectsViolations(t *testing.T) {
	pl := newPipeline(t)
	pl.startAPI(t)
	pl.startCDC(t, "cdc", nil)
	consumer := pl.startConsumer(t, "consumer", nil)
	client := grpcClient(t, pl.grpcAddr)

	const n = 6
	var lastOrder, lastEvent string
	for range n {
		lastOrder, lastEvent = createGRPC(t, client, "verify-customer")
	}
	waitProcessed(t, pl, lastOrder, lastEvent)

	rep, code := runVerify(t, pl)
	if code != 0 || !rep.Drained || rep.LogicalEvents != n || rep.Deliveries != n || rep.BusinessChanges["fulfillment"] != n ||
		rep.Lost != 0 || rep.DuplicateEffects != 0 || rep.OrderingViolations != 0 || rep.MarksWithoutEffect != 0 {
		t.Fatalf("healthy pipeline: exit %d, report %+v; want exit 0, %d events/deliveries/changes, no violation", code, rep, n)
	}

	t.Run("mark and effect deleted", func(t *testing.T) {
		ctx := context.Background()
		tag, err := pl.env.Pool.Exec(ctx, `WITH m AS (DELETE FROM processed_events WHERE consumer = 'fulfillment' AND event_id = $1 RETURNING 1)
			DELETE FROM shipments WHERE order_id = $2`, lastEvent, lastOrder)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("deleting the mark and the shipment: %v (%d rows)", err, tag.RowsAffected())
		}
		rep, code := runVerify(t, pl)
		if code != 1 || rep.Lost != 1 {
			t.Fatalf("exit %d, lost %d (violations %v); want exit 1 and lost 1", code, rep.Lost, rep.Violations)
		}
	})

	t.Run("offset committed past an unapplied event", func(t *testing.T) {
		consumer.stop()
		orderID, eventID := createGRPC(t, client, "verify-skipped")
		waitPublished(t, pl, eventID)
		commitToEnd(t, pl)
		rep, code := runVerify(t, pl)
		if code != 1 || rep.Lost != 2 {
			t.Fatalf("exit %d, lost %d (violations %v); want exit 1 and lost 2 (this one and the deleted mark), order %s", code, rep.Lost, rep.Violations, orderID)
		}
	})
}

// commitToEnd commits the pipeline group's offsets at the end of every
// partition, as a consumer that skipped records would.
func commitToEnd(t *testing.T, pl *pipeline) {
	t.Helper()
	_, ends, err := testenv.CommittedOffsets(pl.env.Endpoints.KafkaBootstrap, pl.env.Group, pl.env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": pl.env.Endpoints.KafkaBootstrap, "group.id": pl.env.Group, "enable.auto.commit": false})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for p, end := range ends {
		tps = append(tps, kafka.TopicPartition{Topic: &pl.env.Topic, Partition: p, Offset: kafka.Offset(end)})
	}
	if _, err := c.CommitOffsets(tps); err != nil {
		t.Fatalf("committing offsets: %v", err)
	}
}

// waitPublished waits until the topic holds one record of eventID.
func waitPublished(t testing.TB, pl *pipeline, eventID string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "event "+eventID+" published", func() error {
		if n := len(recordsByEventID(t, pl)[eventID]); n != 1 {
			return fmt.Errorf("%d records of it in Kafka, want 1", n)
		}
		return nil
	})
}
