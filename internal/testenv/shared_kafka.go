package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/localstack"
)

// EnvOnSharedKafka is Env for a private stack started WithoutKafka: the
// private PostgreSQL's application database and default slot, with a topic
// and a group of its own on the shared stack's broker (removed when the test
// ends).
func (p *Private) EnvOnSharedKafka(t testing.TB) *Env {
	t.Helper()
	e := p.Env(t)
	e.Endpoints.KafkaBootstrap = Stack(t).KafkaBootstrap
	id := Name(ownerPrefix("p"))
	e.Topic = "ef" + id + ".orders"
	e.Group = "ef" + id + "-fulfillment"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := localstack.EnsureTopics(ctx, e.Endpoints.KafkaBootstrap, []localstack.TopicSpec{{Name: e.Topic, Partitions: 6}}); err != nil {
		t.Fatalf("creating topic: %v", err)
	}
	t.Cleanup(func() { e.deleteTopic(t) })
	return e
}

// UseDatabaseURL points the Env, and its pool, at dsn: for example a
// multi-host DSN that follows a promotion.
func (e *Env) UseDatabaseURL(t testing.TB, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("opening pool on %s: %v", dsn, err)
	}
	t.Cleanup(pool.Close)
	e.DatabaseURL, e.Pool = dsn, pool
}
