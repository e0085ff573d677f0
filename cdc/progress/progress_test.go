package progress

import (
	"testing"
	"time"

	"github.com/eventforge/eventforge/cdc/checkpoint"
)

func TestProgressCarriesUnconfirmedAcrossSessions(t *testing.T) {
	t0 := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name          string
		run           func(p *Progress)
		wantOldest    time.Time
		wantConfirmed time.Time
	}{
		{
			name: "nothing seen",
			run:  func(*Progress) {},
		},
		{
			name: "pending in the running session",
			run: func(p *Progress) {
				tr := checkpoint.New(0)
				p.Attach(tr)
				tx := tr.Begin(t0)
				tr.Add(tx, 1)
			},
			wantOldest: t0,
		},
		{
			name: "ended session leaves its oldest pending behind",
			run: func(p *Progress) {
				tr := checkpoint.New(0)
				p.Attach(tr)
				a := tr.Begin(t0)
				tr.Add(a, 1)
				tr.Ack(a, 1)
				tr.Commit(a, 10)
				b := tr.Begin(t0.Add(time.Second))
				tr.Add(b, 1)
				tr.Commit(b, 20)
				p.Detach()
			},
			wantOldest: t0.Add(time.Second), wantConfirmed: t0,
		},
		{
			name: "reset after losing the leadership",
			run: func(p *Progress) {
				tr := checkpoint.New(0)
				p.Attach(tr)
				a := tr.Begin(t0)
				tr.Add(a, 1)
				tr.Commit(a, 10)
				p.Detach()
				p.Reset()
			},
		},
		{
			name: "next session confirms the carried transaction",
			run: func(p *Progress) {
				first := checkpoint.New(0)
				p.Attach(first)
				a := first.Begin(t0)
				first.Add(a, 1)
				first.Commit(a, 10)
				p.Detach()

				second := checkpoint.New(0)
				p.Attach(second)
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
			p := &Progress{}
			tt.run(p)
			oldest, confirmed := p.Snapshot()
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
		run    func(h *Heartbeats)
		now    time.Time
		want   time.Duration
		wantOK bool
	}{
		{name: "nothing sent", run: func(*Heartbeats) {}, now: t0},
		{
			name:   "round trip measured",
			run:    func(h *Heartbeats) { h.Sent(t0); h.Received(t0, t0.Add(30*time.Millisecond)) },
			now:    t0.Add(time.Second),
			want:   30 * time.Millisecond,
			wantOK: true,
		},
		{
			name:   "outstanding heartbeat older than the last round trip",
			run:    func(h *Heartbeats) { h.Sent(t0); h.Received(t0, t0.Add(time.Millisecond)); h.Sent(t0.Add(time.Second)) },
			now:    t0.Add(6 * time.Second),
			want:   5 * time.Second,
			wantOK: true,
		},
		{
			name: "a later heartbeat accounts for earlier ones",
			run: func(h *Heartbeats) {
				h.Sent(t0)
				h.Sent(t0.Add(time.Second))
				h.Received(t0.Add(time.Second), t0.Add(1100*time.Millisecond))
			},
			now:    t0.Add(10 * time.Second),
			want:   100 * time.Millisecond,
			wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &Heartbeats{}
			tt.run(h)
			got, ok := h.Lag(tt.now)
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
			nonce, sentAt, ok := ParseHeartbeat([]byte(tt.content))
			if ok != tt.wantOK || nonce != tt.wantNonce {
				t.Fatalf("parse = %q, %v; want %q, %v", nonce, ok, tt.wantNonce, tt.wantOK)
			}
			if ok && !sentAt.Equal(at) {
				t.Fatalf("sent at %v, want %v", sentAt, at)
			}
		})
	}
}

func TestProgressPublishing(t *testing.T) {
	p := &Progress{}
	now := time.Now()
	if p.Publishing(now, time.Minute) {
		t.Fatal("publishing without a session")
	}
	tr := checkpoint.New(100)
	p.Attach(tr)
	if !p.Publishing(now, time.Minute) {
		t.Fatal("a session with nothing in flight is not publishing")
	}
	tx := tr.Begin(now)
	tr.Add(tx, 10)
	if !p.Publishing(time.Now(), time.Minute) {
		t.Fatal("an event just handed to Kafka counts as a stall")
	}
	if p.Publishing(time.Now().Add(2*time.Minute), time.Minute) {
		t.Fatal("an event unacknowledged for two minutes is not a stall of one")
	}
	tr.Ack(tx, 10)
	if !p.Publishing(time.Now().Add(2*time.Minute), time.Minute) {
		t.Fatal("nothing in flight after the ack, still stalled")
	}
	p.Detach()
	if p.Publishing(time.Now(), time.Minute) {
		t.Fatal("publishing after the session ended")
	}
}
