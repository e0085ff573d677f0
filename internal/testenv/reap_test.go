package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/schema"
)

// TestReapDropsWhatEndedProcessesLeft: the database, slot and topic named
// for a test process that is gone are dropped; those of a live process stay.
func TestReapDropsWhatEndedProcessesLeft(t *testing.T) {
	ep := Stack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	dead := Name("t" + strconv.Itoa(ended.Process.Pid))
	alive := Name(ownerPrefix("t"))
	admin, err := pgx.Connect(ctx, ep.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, id := range []string{dead, alive} {
		leaveBehind(ctx, t, admin, ep, "ef"+id)
	}
	t.Cleanup(func() {
		_ = schema.DropSlotsIfExist(context.Background(), admin, "ef"+alive)
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{"ef" + alive}.Sanitize()+" WITH (FORCE)")
		_ = DeleteTopics(ep.KafkaBootstrap, "ef"+alive+".orders")
	})

	if err := reapOrphans(ctx, ep); err != nil {
		t.Fatalf("reaping: %v", err)
	}
	for _, c := range []struct {
		id   string
		want bool
	}{{dead, false}, {alive, true}} {
		var slot, db bool
		if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1),
			EXISTS (SELECT FROM pg_database WHERE datname = $1)`, "ef"+c.id).Scan(&slot, &db); err != nil {
			t.Fatal(err)
		}
		if slot != c.want || db != c.want {
			t.Errorf("ef%s after the reap: slot %v, database %v; want both %v", c.id, slot, db, c.want)
		}
	}
	Eventually(t, time.Minute, "the ended process's topic deleted", func() error {
		topics, err := topicNames(ep.KafkaBootstrap)
		if err != nil {
			return err
		}
		if _, ok := topics["ef"+alive+".orders"]; !ok {
			t.Fatalf("the live process's topic ef%s.orders was deleted", alive)
		}
		if _, ok := topics["ef"+dead+".orders"]; ok {
			return fmt.Errorf("topic ef%s.orders still exists", dead)
		}
		return nil
	})
}

// leaveBehind makes what a test process leaves when it dies before its
// cleanup: a database, a logical slot in it, a topic.
func leaveBehind(ctx context.Context, t *testing.T, admin *pgx.Conn, ep localstack.Endpoints, name string) {
	t.Helper()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(ep.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
		t.Fatal(err)
	}
	if err := localstack.EnsureTopics(ctx, ep.KafkaBootstrap, []localstack.TopicSpec{{Name: name + ".orders", Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
}

// topicNames lists the broker's topics.
func topicNames(bootstrap string) (map[string]struct{}, error) {
	names := map[string]struct{}{}
	err := withAdmin(bootstrap, func(_ context.Context, a *kafka.AdminClient) error {
		md, err := a.GetMetadata(nil, true, 10_000)
		if err != nil {
			return err
		}
		for n := range md.Topics {
			names[n] = struct{}{}
		}
		return nil
	})
	return names, err
}
