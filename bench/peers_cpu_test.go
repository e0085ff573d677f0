package bench

import "testing"

func TestStatPPID(t *testing.T) {
	for _, tt := range []struct {
		line  string
		ppid  int
		state string
		ok    bool
	}{
		{"4242 (postgres) S 4200 4242 4242 0 -1 4194560 300 0 0 0 12 7 0 0 20 0 1 0 100 1000 200", 4200, "S", true},
		{"77 (a) b) R 1 77 77 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 5 6 7", 1, "R", true},
		{"garbage", 0, "", false},
	} {
		ppid, state, ok := statPPID([]byte(tt.line))
		if ppid != tt.ppid || state != tt.state || ok != tt.ok {
			t.Errorf("statPPID(%q) = %d, %q, %v; want %d, %q, %v", tt.line, ppid, state, ok, tt.ppid, tt.state, tt.ok)
		}
	}
}
