package freeport

import (
	"net"
	"testing"
)

// No port is handed out twice, within one call or across calls, and each is
// bindable when returned.
func TestPortsAreDistinctAndFree(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		ports, err := Ports(5)
		if err != nil {
			t.Fatal(err)
		}
		if len(ports) != 5 {
			t.Fatalf("got %d ports, want 5", len(ports))
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	addr, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address Addr returned cannot be bound: %v", err)
	}
	l.Close()
	if _, port, _ := net.SplitHostPort(addr); port == "" {
		t.Fatalf("Addr returned %q", addr)
	}
}
