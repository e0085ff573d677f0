package testenv

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// TestNetworkCutsOneHost: a process in a namespace reaches a listener on
// the bridge's address; with its link cut it reaches nothing, and after
// the heal it does again.
func TestNetworkCutsOneHost(t *testing.T) {
	n := NewNetwork(t)
	h := n.AddHost(t)
	l, err := net.Listen("tcp", n.HostAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	dial := func() error {
		// bash's /dev/tcp, in the namespace, for at most 2 s.
		return h.Command("timeout", "2", "bash", "-c", "exec 3<>/dev/tcp/"+n.HostAddr+"/"+strconv.Itoa(port)).Run()
	}
	if err := dial(); err != nil {
		t.Fatalf("from the namespace to %s:%d: %v", n.HostAddr, port, err)
	}
	if err := h.Cut(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := dial(); err == nil {
		t.Fatal("connected with the link cut")
	}
	t.Logf("cut: the dial failed after %s", time.Since(began).Round(100*time.Millisecond))
	if err := h.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}
