package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// setTopicMaxMessageBytes sets (or, with 0, removes) the topic-level
// max.message.bytes of topic through the Admin API.
func setTopicMaxMessageBytes(t testing.TB, bootstrap, topic string, limit int) {
	t.Helper()
	if err := alterTopicMaxMessageBytes(bootstrap, topic, limit); err != nil {
		t.Fatal(err)
	}
}

// alterTopicMaxMessageBytes is setTopicMaxMessageBytes returning its error.
func alterTopicMaxMessageBytes(bootstrap, topic string, limit int) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 0})
	if err != nil {
		return err
	}
	defer a.Close()
	entry := kafka.ConfigEntry{Name: "max.message.bytes", Value: fmt.Sprint(limit), IncrementalOperation: kafka.AlterConfigOpTypeSet}
	if limit == 0 {
		entry = kafka.ConfigEntry{Name: "max.message.bytes", IncrementalOperation: kafka.AlterConfigOpTypeDelete}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.IncrementalAlterConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic, Config: []kafka.ConfigEntry{entry}}})
	if err != nil {
		return fmt.Errorf("altering max.message.bytes of %s: %w", topic, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("altering max.message.bytes of %s: %w", topic, r.Error)
		}
	}
	return nil
}

// bigOrder creates, through the API, an order of 100 lines with random
// 64-character SKUs: an OrderCreated payload of about 11 kB that
// compression cannot shrink much.
func bigOrder(t testing.TB, pl *pipeline) (orderID, eventID string) {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	items := make([]*eventforgev1.OrderItem, 100)
	for i := range items {
		sku := make([]byte, 64)
		for j := range sku {
			sku[j] = alphabet[rand.IntN(len(alphabet))]
		}
		items[i] = &eventforgev1.OrderItem{Sku: string(sku), Quantity: 1, UnitPriceCents: 100}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := grpcClient(t, pl.grpcAddr).CreateOrder(ctx, &eventforgev1.CreateOrderRequest{CustomerId: "oversized", Currency: "EUR", Items: items})
	if err != nil {
		t.Fatalf("creating the oversized order: %v", err)
	}
	orderID = resp.GetOrder().GetOrderId()
	if err := pl.env.Pool.QueryRow(ctx, `SELECT id::text FROM outbox WHERE aggregateid = $1`, orderID).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	return orderID, eventID
}

// eventProcessed reports whether the fulfillment consumer applied eventID.
func eventProcessed(t testing.TB, pl *pipeline, eventID string) bool {
	t.Helper()
	var ok bool
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM processed_events WHERE consumer = 'fulfillment' AND event_id = $1)`, eventID).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// windowRelayDeadLetter: under load, the topic's max.message.bytes is
// lowered below one order's record and that order is created. Kafka
// refuses it; the relay writes it to its dead-letter table, counts it and
// moves on — orders created after it are applied within 30 s. Once the limit
// is raised again, `eventforge outbox dead-letters replay` publishes it with
// its original event ID, the consumer applies it, and verify passes.
func windowRelayDeadLetter(t *testing.T) {
	pl := newPipeline(t)
	pl.startAPI(t)
	metrics := testkit.FreeAddr(t)
	pl.startCDC(t, "cdc", nil, "--metrics-addr", metrics)
	pl.startConsumer(t, "consumer", nil)

	load := startOrderLoad(t, pl, 20)
	waitApplying(t, pl, 50, "the pipeline applying before the limit is lowered")
	const limit = 4000
	setTopicMaxMessageBytes(t, pl.env.Endpoints.KafkaBootstrap, pl.env.Topic, limit)
	t.Logf("topic %s: max.message.bytes %d", pl.env.Topic, limit)

	orderID, eventID := bigOrder(t, pl)
	t.Logf("oversized order %s, event %s", orderID, eventID)
	// Orders created after the refused one flow within 30 s.
	var later []string
	for i := range 5 {
		_, id := createGRPC(t, grpcClient(t, pl.grpcAddr), fmt.Sprintf("after-%d", i))
		later = append(later, id)
	}
	testenv.Eventually(t, 30*time.Second, "orders created after the refused one applied", func() error {
		for _, id := range later {
			if !eventProcessed(t, pl, id) {
				return fmt.Errorf("event %s not applied yet", id)
			}
		}
		return nil
	})
	var (
		code, topic string
		replayed    *time.Time
	)
	testenv.Eventually(t, 30*time.Second, "the refused event in the dead-letter table", func() error {
		return pl.env.Pool.QueryRow(context.Background(), `SELECT error_code, topic, replayed_at FROM cdc_dead_letters WHERE event_id = $1`, eventID).
			Scan(&code, &topic, &replayed)
	})
	if topic != pl.env.Topic || replayed != nil {
		t.Errorf("dead letter: topic %s replayed %v, want topic %s not replayed", topic, replayed, pl.env.Topic)
	}
	t.Logf("dead letter: %s", code)
	if v, ok := scrape(metrics, "eventforge_cdc_dead_lettered_total"); !ok || v < 1 {
		t.Errorf("eventforge_cdc_dead_lettered_total = %v (scraped %v), want at least 1", v, ok)
	}
	var listed []struct {
		EventID string `json:"event_id"`
	}
	out := eventforge(t, 0, "outbox", "dead-letters", "list", "--json", "--database-url", pl.env.DatabaseURL).Combined
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) == 0 {
		t.Fatalf("dead-letters list: %v\n%s", err, out)
	}
	var others []string
	for _, d := range listed {
		if d.EventID != eventID {
			others = append(others, d.EventID)
		}
	}
	if len(others) > 0 {
		// A record batched with the oversized one is produced alone, so
		// only the oversized one may be dead-lettered.
		t.Errorf("dead-lettered besides the oversized event: %v", others)
	}
	if recs, err := testenv.ReadTopic(pl.env.Endpoints.KafkaBootstrap, pl.env.Topic); err != nil {
		t.Fatal(err)
	} else {
		for _, r := range recs {
			if r.Headers[contract.HeaderID] == eventID {
				t.Fatalf("the refused event is in Kafka at %d@%d before the replay", r.Partition, r.Offset)
			}
		}
	}

	setTopicMaxMessageBytes(t, pl.env.Endpoints.KafkaBootstrap, pl.env.Topic, 0)
	t.Log("topic limit back to the broker's default; replaying")
	out = eventforge(t, 0, "outbox", "dead-letters", "replay", "--database-url", pl.env.DatabaseURL,
		"--kafka-brokers", pl.env.Endpoints.KafkaBootstrap).Combined
	t.Logf("replay: %s", out)
	waitEventsInKafka(t, pl.env, []string{eventID}, time.Minute)
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT replayed_at FROM cdc_dead_letters WHERE event_id = $1`, eventID).Scan(&replayed); err != nil || replayed == nil {
		t.Errorf("dead letter after the replay: replayed_at %v (%v), want set", replayed, err)
	}
	load.finish(t)
	mustDrain(t, pl)
	mustVerify(t, pl)
}
