package bench

import (
	"slices"
	"testing"
	"time"
)

func TestSelectPhases(t *testing.T) {
	all := []string{"postgres", "api", "drain", "apply", "e2e"}
	for _, tt := range []struct {
		name      string
		requested []string
		want      []string
		refused   bool
	}{
		{"none means all", nil, all, false},
		{"in the order of the phases", []string{"drain", "postgres"}, []string{"postgres", "drain"}, false},
		{"apply with drain", []string{"apply", "drain"}, []string{"drain", "apply"}, false},
		{"apply needs drain", []string{"apply"}, nil, true},
		{"e2e needs api, drain and apply", []string{"e2e", "drain", "apply"}, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			selected, order, err := selectPhases(tt.requested, all)
			if (err != nil) != tt.refused {
				t.Fatalf("err = %v, refused %v", err, tt.refused)
			}
			if tt.refused {
				return
			}
			if !slices.Equal(order, tt.want) || len(selected) != len(tt.want) {
				t.Fatalf("order %v (set %v), want %v", order, selected, tt.want)
			}
		})
	}
}

func TestSizesForPeers(t *testing.T) {
	sz := sizesFor(false).forPeers(Config{})
	if !slices.Equal(sz.peerRates, []int{500, 2000}) || sz.peerBacklog != 200_000 || sz.peerRounds != 3 ||
		sz.peerWarmupOrders != 20_000 || sz.peerWarmup != 5*time.Second || sz.peerDuration != 10*time.Second {
		t.Fatalf("defaults: rates %v, backlog %d, rounds %d, warm-up %s, duration %s", sz.peerRates, sz.peerBacklog, sz.peerRounds, sz.peerWarmup, sz.peerDuration)
	}
	if smoke := sizesFor(true); smoke.peerRounds < 3 {
		t.Fatalf("smoke: %d rounds, want at least 3", smoke.peerRounds)
	}
	sz = sizesFor(false).forPeers(Config{PeerRates: []int{2000}, PeerBacklog: 5000, PeerRounds: 2, PeerWarmup: time.Second, PeerDuration: 20 * time.Second})
	if !slices.Equal(sz.peerRates, []int{2000}) || sz.peerBacklog != 5000 || sz.peerRounds != 2 || sz.peerWarmup != time.Second || sz.peerDuration != 20*time.Second {
		t.Fatalf("narrowed: rates %v, backlog %d, rounds %d, warm-up %s, duration %s", sz.peerRates, sz.peerBacklog, sz.peerRounds, sz.peerWarmup, sz.peerDuration)
	}
	if sz.backlog != 200_000 {
		t.Fatalf("the drain phase's backlog changed to %d", sz.backlog)
	}
}
