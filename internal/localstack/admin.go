package localstack

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// admin is a Kafka AdminClient whose librdkafka logs and client errors go
// to a slog.Logger at debug level. AdminClient has no log channel of its
// own, so it is derived from a producer that has one.
type admin struct {
	admin    *kafka.AdminClient
	producer *kafka.Producer
	done     sync.WaitGroup
}

func newAdmin(bootstrap string, log *slog.Logger) (*admin, error) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":      bootstrap,
		"client.id":              "eventforge-localstack",
		"go.logs.channel.enable": true,
		"socket.timeout.ms":      10000,
	})
	if err != nil {
		return nil, fmt.Errorf("creating kafka admin client: %w", err)
	}
	a, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("creating kafka admin client: %w", err)
	}
	ad := &admin{admin: a, producer: p}
	ad.done.Add(2)
	go func() {
		defer ad.done.Done()
		for e := range p.Logs() {
			log.Debug("librdkafka", "level", e.Level, "tag", e.Tag, "message", e.Message)
		}
	}()
	go func() {
		defer ad.done.Done()
		for ev := range p.Events() {
			if err, ok := ev.(kafka.Error); ok {
				log.Debug("kafka client error", "error", err.Error(), "code", err.Code().String())
			}
		}
	}()
	return ad, nil
}

// close releases the client and waits for its log forwarders to finish.
func (a *admin) close() {
	a.admin.Close()
	a.producer.Close()
	a.done.Wait()
}
