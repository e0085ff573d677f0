package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// partitionOf is the partition librdkafka's default partitioner
// (consistent_random: CRC-32 of the key) gives a keyed record.
func partitionOf(key string, partitions int) int {
	return int(crc32.ChecksumIEEE([]byte(key)) % uint32(partitions))
}

// keyOnPartitionOf returns a new order ID whose records land in the same
// partition as those of orderID.
func keyOnPartitionOf(orderID string, partitions int) string {
	want := partitionOf(orderID, partitions)
	for {
		if k := uuid.NewString(); partitionOf(k, partitions) == want {
			return k
		}
	}
}

// insertOutboxRow commits one outbox row of order orderID.
func insertOutboxRow(t testing.TB, env *testenv.Env, orderID, typ, payload string) string {
	t.Helper()
	id := uuid.NewString()
	_, err := env.Pool.Exec(context.Background(), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'order', $2, $3, $4)`,
		id, orderID, typ, payload)
	if err != nil {
		t.Fatalf("inserting %s of order %s: %v", typ, orderID, err)
	}
	return id
}

// incompressible returns a JSON payload of about n bytes that lz4 cannot
// shrink much.
func incompressible(n int) string {
	b := make([]byte, n*3/4)
	_, _ = rand.Read(b)
	return fmt.Sprintf(`{"pad": %q}`, base64.StdEncoding.EncodeToString(b))
}

// TestCDCRefusedBatchKeepsOrder: Kafka refuses a batch permanently (one of
// its records is over the topic's max.message.bytes) while a later record of
// the same partition — the next event of an innocent order in the refused
// batch — is already in flight in the next produce request. The later record
// must not reach Kafka before the innocent one: the first delivery of each
// event of an order stays in commit order, and only the oversized record is
// dead-lettered.
//
// The broker is frozen while the reader produces, so that both requests are
// in flight together when it answers: the first with MSG_SIZE_TOO_LARGE, the
// second with an out-of-order sequence — or appended, when the broker does
// not know the producer yet. An idempotent producer then bumps its epoch and
// delivers the second request's records, and the next session publishes
// the innocent record after them, unless the relay holds an order's next
// transaction back until its earlier one is acknowledged.
func TestCDCRefusedBatchKeepsOrder(t *testing.T) {
	cluster := startPrivateKafka(t, 1)
	env := testenv.NewOnCluster(t, cluster)
	const limit = 64 << 10
	setTopicMaxMessageBytes(t, cluster.Bootstrap, env.Topic, limit)
	cdcReader(t, env, "cdc", nil)

	warm := insertOutboxRow(t, env, uuid.NewString(), contract.TypeOrderCreated, `{"warm": true}`)
	waitEventsInKafka(t, env, []string{warm}, time.Minute)

	innocent := uuid.NewString()
	oversized := keyOnPartitionOf(innocent, 6)
	if err := cluster.Pause(0); err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			_ = cluster.Resume(0)
		}
	}()
	// One transaction: the innocent order's OrderCreated and a record over
	// the topic's limit, produced back to back into one batch.
	var created, big string
	err := func() error {
		tx, err := env.Pool.Begin(context.Background())
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		created, big = uuid.NewString(), uuid.NewString()
		if _, err := tx.Exec(context.Background(), `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'order', $2, 'OrderCreated', '{"innocent": true}'), ($3, 'order', $4, 'OrderCreated', $5)`,
			created, innocent, big, oversized, incompressible(4*limit)); err != nil {
			return err
		}
		return tx.Commit(context.Background())
	}()
	if err != nil {
		t.Fatal(err)
	}
	// The reader produces the batch; librdkafka writes it to the frozen
	// broker's socket. The innocent order's next event then goes into the
	// next request.
	time.Sleep(time.Second)
	cancelled := insertOutboxRow(t, env, innocent, contract.TypeOrderCancelled, `{"innocent": true}`)
	time.Sleep(time.Second)
	if err := cluster.Resume(0); err != nil {
		t.Fatal(err)
	}
	paused = false
	t.Logf("innocent order %s: OrderCreated %s, OrderCancelled %s; oversized event %s of order %s", innocent, created, cancelled, big, oversized)

	waitEventsInKafka(t, env, []string{created, cancelled}, 2*time.Minute)
	testenv.Eventually(t, time.Minute, "the oversized event in the dead-letter table", func() error {
		var n int
		if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM cdc_dead_letters WHERE event_id = $1`, big).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d dead letters of event %s", n, big)
		}
		return nil
	})
	recs, err := testenv.ReadTopic(cluster.Bootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	var seq []string
	for _, r := range recs {
		if r.Key != innocent {
			continue
		}
		switch r.Headers[contract.HeaderID] {
		case created:
			seq = append(seq, fmt.Sprintf("OrderCreated@%d", r.Offset))
		case cancelled:
			seq = append(seq, fmt.Sprintf("OrderCancelled@%d", r.Offset))
		}
	}
	t.Logf("the innocent order's records in partition order: %v", seq)
	var first string
	for _, r := range recs {
		if r.Key == innocent {
			first = r.Headers[contract.HeaderID]
			break
		}
	}
	if first != created {
		t.Errorf("the innocent order's first record is %s, want its OrderCreated %s first: %v", first, created, seq)
	}
	var dead []string
	rows, err := env.Pool.Query(context.Background(), `SELECT event_id::text FROM cdc_dead_letters WHERE event_id <> $1`, big)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, id)
	}
	if len(dead) > 0 {
		t.Errorf("dead-lettered besides the oversized event: %v", dead)
	}
}
