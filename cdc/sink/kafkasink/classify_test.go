package kafkasink

import (
	"errors"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func TestPermanent(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"record over the topic's max.message.bytes", kafka.NewError(kafka.ErrMsgSizeTooLarge, "too large", false), true},
		{"wrapped by Publish", fmt.Errorf("producing event e1: %w", kafka.NewError(kafka.ErrMsgSizeTooLarge, "too large", false)), true},
		{"routed topic does not exist", kafka.NewError(kafka.ErrUnknownTopic, "unknown topic", false), true},
		{"unknown topic from the broker", kafka.NewError(kafka.ErrUnknownTopicOrPart, "unknown", false), true},
		{"topic not authorised", kafka.NewError(kafka.ErrTopicAuthorizationFailed, "denied", false), true},
		{"invalid record", kafka.NewError(kafka.ErrInvalidRecord, "invalid", false), true},
		{"purged at a session end", kafka.NewError(kafka.ErrPurgeQueue, "purged", false), false},
		{"purged in flight", kafka.NewError(kafka.ErrPurgeInflight, "purged", false), false},
		{"broker down", kafka.NewError(kafka.ErrAllBrokersDown, "down", false), false},
		{"timed out", kafka.NewError(kafka.ErrMsgTimedOut, "timed out", false), false},
		{"leader moved", kafka.NewError(kafka.ErrNotLeaderForPartition, "moved", false), false},
		{"fatal producer error, even with a record's code", kafka.NewError(kafka.ErrMsgSizeTooLarge, "fatal", true), false},
		{"not a Kafka error", errors.New("something"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Permanent(tt.err); got != tt.want {
				t.Errorf("Permanent(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	if got := ErrorCode(kafka.NewError(kafka.ErrMsgSizeTooLarge, "x", false)); got != "10 Broker: Message size too large" {
		t.Errorf("ErrorCode = %q", got)
	}
}
