package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Network is a Linux bridge on this machine with network namespaces
// attached to it, one per process that a test cuts off the network: the
// process runs in its namespace and reaches the services through the
// bridge's address; taking its link down partitions it from everything
// while the rest of the machine goes on. Traffic stays between the
// namespaces and this machine: the namespaces have no route but the
// bridge's subnet. Making one needs root and iproute2's ip; a test that
// needs it fails (never skips) without them.
type Network struct {
	// HostAddr is the bridge's address: services listen on it, processes
	// in the namespaces dial it.
	HostAddr string
	// CIDR is the bridge's subnet, for pg_hba.conf.
	CIDR string

	id     string
	bridge string
	prefix string // the subnet's first three octets
	mu     sync.Mutex
	hosts  int
}

// NetHost is one network namespace on a Network.
type NetHost struct {
	// Namespace is the namespace's name (ip netns).
	Namespace string
	// Addr is its address on the bridge.
	Addr string
	link string // the host end of its veth pair, in the bridge
}

// ipCmd runs ip with args.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NewNetwork makes a bridge with an address of a free 10.213.x.0/24 subnet;
// it and every namespace on it are removed when the test ends.
func NewNetwork(t testing.TB) *Network {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("a network namespace needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("a network namespace needs iproute2's ip: %v", err)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	n := &Network{id: hex.EncodeToString(b)}
	n.bridge = "efb" + n.id
	if err := ipCmd("link", "add", n.bridge, "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ipCmd("link", "del", n.bridge) })
	for range 20 {
		x, _ := rand.Int(rand.Reader, big.NewInt(250))
		n.prefix = fmt.Sprintf("10.213.%d", x.Int64()+2)
		if ipCmd("addr", "add", n.prefix+".1/24", "dev", n.bridge) == nil {
			break
		}
		n.prefix = ""
	}
	if n.prefix == "" {
		t.Fatalf("no free 10.213.x.0/24 subnet for bridge %s", n.bridge)
	}
	if err := ipCmd("link", "set", n.bridge, "up"); err != nil {
		t.Fatal(err)
	}
	n.HostAddr, n.CIDR = n.prefix+".1", n.prefix+".0/24"
	return n
}

// AddHost makes a namespace attached to the bridge, with the next address.
func (n *Network) AddHost(t testing.TB) *NetHost {
	t.Helper()
	n.mu.Lock()
	n.hosts++
	k := n.hosts
	n.mu.Unlock()
	h := &NetHost{
		Namespace: fmt.Sprintf("ef%s-%d", n.id, k),
		Addr:      fmt.Sprintf("%s.%d", n.prefix, k+1),
		link:      fmt.Sprintf("efh%s%d", n.id, k),
	}
	peer := fmt.Sprintf("efn%s%d", n.id, k)
	if err := ipCmd("netns", "add", h.Namespace); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ipCmd("netns", "del", h.Namespace) })
	for _, args := range [][]string{
		{"link", "add", h.link, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", h.Namespace},
		{"link", "set", h.link, "master", n.bridge},
		{"link", "set", h.link, "up"},
		{"-n", h.Namespace, "addr", "add", h.Addr + "/24", "dev", peer},
		{"-n", h.Namespace, "link", "set", peer, "up"},
		{"-n", h.Namespace, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// Cut takes the host's link down: nothing it sends arrives, nothing sent
// to it arrives, and nobody is told.
func (h *NetHost) Cut() error { return ipCmd("link", "set", h.link, "down") }

// Heal brings the host's link up again.
func (h *NetHost) Heal() error { return ipCmd("link", "set", h.link, "up") }

// Command returns name with args run in the host's namespace.
func (h *NetHost) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Namespace, name}, args...)...)
}
