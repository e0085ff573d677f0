package cdc

import (
	"testing"
	"time"

	"github.com/eventforge/eventforge/cdc/checkpoint"
)

func TestProgressCarriesUnconfirmedAcrossSessions(t *testing.T) {
	t0 := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name          string
		run           func(p *progress)
		wantOldest    time.Time
		wantConfirmed time.Time
	}{
		{
			name: "nothing seen",
			run:  func(*progress) {},
		},
		{
			name: "pending in the running session",
			run: func(p *progress) {
				tr := checkpoint.New(0)
				p.attach(tr)
				tx := tr.Begin(t0)
				tr.Add(tx, 1)
			},
			wantOldest: t0,
		},
		{
			name: "ended session leaves its oldest pending behind",
			run: func(p *progress) {
				tr := checkpoint.New(0)
				p.attach(tr)
				a := tr.Begin(t0)
				tr.Add(a, 1)
				tr.Ack(a, 1)
				tr.Commit(a, 10)
				b := tr.Begin(t0.Add(time.Second))
				tr.Add(b, 1)
				tr.Commit(b, 20)
				p.detach()
			},
			wantOldest: t0.Add(time.Second), wantConfirmed: t0,
		},
		{
			name: "reset after losing the leadership",
			run: func(p *progress) {
				tr := checkpoint.New(0)
				p.attach(tr)
				a := tr.Begin(t0)
				tr.Add(a, 1)
				tr.Commit(a, 10)
				p.detach()
				p.reset()
			},
		},
		{
			name: "next session confirms the carried transaction",
			run: func(p *progress) {
				first := checkpoint.New(0)
				p.attach(first)
				a := first.Begin(t0)
				first.Add(a, 1)
				first.Commit(a, 10)
				p.detach()

				second := checkpoint.New(0)
				p.attach(second)
				b := second.Begin(t0)
				second.Add(b, 1)
				second.Commit(b, 10)
				second.Ack(b, 1)
			},
			wantConfirmed: t0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &progress{}
			tt.run(p)
			oldest, confirmed := p.snapshot()
			if !oldest.Equal(tt.wantOldest) {
				t.Errorf("oldest = %v, want %v", oldest, tt.wantOldest)
			}
			if !confirmed.Equal(tt.wantConfirmed) {
				t.Errorf("confirmed = %v, want %v", confirmed, tt.wantConfirmed)
			}
		})
	}
}

func TestHeartbeatLag(t *testing.T) {
	t0 := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		run    func(h *heartbeats)
		now    time.Time
		want   time.Duration
		wantOK bool
	}{
		{name: "nothing sent", run: func(*heartbeats) {}, now: t0},
		{
			name:   "round trip measured",
			run:    func(h *heartbeats) { h.sent(t0); h.received(t0, t0.Add(30*time.Millisecond)) },
			now:    t0.Add(time.Second),
			want:   30 * time.Millisecond,
			wantOK: true,
		},
		{
			name:   "outstanding heartbeat older than the last round trip",
			run:    func(h *heartbeats) { h.sent(t0); h.received(t0, t0.Add(time.Millisecond)); h.sent(t0.Add(time.Second)) },
			now:    t0.Add(6 * time.Second),
			want:   5 * time.Second,
			wantOK: true,
		},
		{
			name: "a later heartbeat accounts for earlier ones",
			run: func(h *heartbeats) {
				h.sent(t0)
				h.sent(t0.Add(time.Second))
				h.received(t0.Add(time.Second), t0.Add(1100*time.Millisecond))
			},
			now:    t0.Add(10 * time.Second),
			want:   100 * time.Millisecond,
			wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &heartbeats{}
			tt.run(h)
			got, ok := h.lag(tt.now)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("lag = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParseHeartbeat(t *testing.T) {
	at := time.Unix(0, 1700000000123456789)
	tests := []struct {
		content   string
		wantNonce string
		wantOK    bool
	}{
		{content: "abc/1700000000123456789", wantNonce: "abc", wantOK: true},
		{content: "no-separator"},
		{content: "abc/not-a-number"},
	}
	for _, tt := range tests {
		t.Run(tt.content, func(t *testing.T) {
			nonce, sentAt, ok := parseHeartbeat([]byte(tt.content))
			if ok != tt.wantOK || nonce != tt.wantNonce {
				t.Fatalf("parse = %q, %v; want %q, %v", nonce, ok, tt.wantNonce, tt.wantOK)
			}
			if ok && !sentAt.Equal(at) {
				t.Fatalf("sent at %v, want %v", sentAt, at)
			}
		})
	}
}

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
		{name: "producer request timeout", mutate: func(c *Config) { c.ProducerSettings = map[string]string{"request.timeout.ms": "2000"} }},
		{name: "producer message timeout", mutate: func(c *Config) { c.ProducerSettings = map[string]string{"message.timeout.ms": "5000"} }, wantErr: true},
		{name: "producer idempotence", mutate: func(c *Config) { c.ProducerSettings = map[string]string{"enable.idempotence": "false"} }, wantErr: true},
		{name: "producer go channel", mutate: func(c *Config) { c.ProducerSettings = map[string]string{"go.events.channel.size": "1"} }, wantErr: true},
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

func TestBackoff(t *testing.T) {
	b := backoff{max: time.Second}
	var last time.Duration
	for range 10 {
		last = b.next(0)
		if last > time.Second {
			t.Fatalf("backoff %v exceeds the cap", last)
		}
	}
	if last < 500*time.Millisecond {
		t.Fatalf("backoff after 10 failures = %v, want at least half the cap", last)
	}
	if got := b.next(2 * time.Minute); got > 250*time.Millisecond {
		t.Fatalf("backoff after a long run = %v, want a fresh start", got)
	}
}
