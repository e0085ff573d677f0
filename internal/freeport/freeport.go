// Package freeport finds free TCP ports on the loopback interface for
// processes the binary or a test is about to start (the dev supervisor's
// metrics endpoints, the bench's components, private stacks in tests).
//
// A port is free when the kernel hands it out for 127.0.0.1:0; it stays free
// only until someone binds it, so callers bind it soon. The kernel may hand
// the same port out again once the probe's listener is closed: this package
// never returns a port twice within one process, so two processes started
// one after the other never get the same address.
package freeport

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// Ports returns n distinct free loopback ports, none returned before by
// this process.
func Ports(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	// All probes stay open until n are found, so the kernel cannot hand the
	// same port out twice within one call.
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, l)
		if port := l.Addr().(*net.TCPAddr).Port; !handedOut.ports[port] {
			handedOut.ports[port] = true
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// Addr returns a free loopback address (127.0.0.1:port) whose port Ports
// and Addr never returned before in this process.
func Addr() (string, error) {
	ports, err := Ports(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}
