package cdc

import (
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{name: "defaults", mutate: func(*Config) {}},
		{name: "no inflight events", mutate: func(c *Config) { c.MaxInflightEvents = 0 }, wantErr: true},
		{name: "no inflight bytes", mutate: func(c *Config) { c.MaxInflightBytes = 0 }, wantErr: true},
		{name: "no heartbeat", mutate: func(c *Config) { c.HeartbeatInterval = 0 }, wantErr: true},
		{name: "negative retention", mutate: func(c *Config) { c.OutboxRetention = -time.Hour }, wantErr: true},
		{name: "retention off ignores prune batch", mutate: func(c *Config) { c.OutboxRetention = 0; c.PruneBatch = 0 }},
		{name: "bad outbox table", mutate: func(c *Config) { c.OutboxTable = "outbox" }, wantErr: true},
		{name: "producer request timeout", mutate: func(c *Config) { c.Kafka.ProducerSettings = map[string]string{"request.timeout.ms": "2000"} }},
		{name: "producer message timeout", mutate: func(c *Config) { c.Kafka.ProducerSettings = map[string]string{"message.timeout.ms": "5000"} }, wantErr: true},
		{name: "producer idempotence", mutate: func(c *Config) { c.Kafka.ProducerSettings = map[string]string{"enable.idempotence": "false"} }, wantErr: true},
		{name: "producer go channel", mutate: func(c *Config) { c.Kafka.ProducerSettings = map[string]string{"go.events.channel.size": "1"} }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			if err := c.Validate(); (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}
