package testenv

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Blackhole is a TCP proxy on loopback in front of a server (PostgreSQL,
// say) that can stop delivering bytes without closing any connection, as a
// network that drops every packet does, or a server paused with SIGSTOP:
// while it is blocked, bytes sent either way are held, not delivered, and
// new connections are accepted but neither forwarded nor answered. A
// connection whose client gives up while blocked never reaches the server
// (its handshake was "lost"); on Unblock, what established connections
// sent is delivered in order, closes included, as TCP retransmission does
// once a network heals. The shared server itself is never touched, so a
// test can blackhole the route of its own processes while other tests use
// the server. Closed at the end of the test.
type Blackhole struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	open  chan struct{} // closed while bytes flow
	conns map[net.Conn]bool

	closed chan struct{}
	wg     sync.WaitGroup
}

// NewBlackhole starts a proxy to target (host:port), passing bytes.
func NewBlackhole(t testing.TB, target string) *Blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("blackhole: listening: %v", err)
	}
	b := &Blackhole{target: target, ln: ln, open: make(chan struct{}), conns: map[net.Conn]bool{}, closed: make(chan struct{})}
	close(b.open)
	b.wg.Go(b.accept)
	t.Cleanup(b.close)
	return b
}

// Addr is the proxy's host:port.
func (b *Blackhole) Addr() string { return b.ln.Addr().String() }

// URL returns the connection URL u (postgres://…) routed through the
// proxy: its host and port replaced by Addr.
func (b *Blackhole) URL(t testing.TB, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("blackhole: parsing %q: %v", u, err)
	}
	p.Host = b.Addr()
	return p.String()
}

// Block stops delivering bytes and answering new connections.
func (b *Blackhole) Block() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.open:
		b.open = make(chan struct{})
	default:
	}
}

// Unblock delivers what was held and lets bytes flow again.
func (b *Blackhole) Unblock() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.open:
	default:
		close(b.open)
	}
}

func (b *Blackhole) gate() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// pass waits until bytes may flow; false when the proxy closed.
func (b *Blackhole) pass() bool {
	select {
	case <-b.gate():
		return true
	case <-b.closed:
		return false
	}
}

func (b *Blackhole) untrack(c net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.conns, c)
	c.Close()
}

func (b *Blackhole) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.closed:
		c.Close()
		return false
	default:
	}
	b.conns[c] = true
	return true
}

func (b *Blackhole) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		if !b.track(c) {
			return
		}
		b.wg.Go(func() { b.serve(c) })
	}
}

// serve handles one client connection: it reads what the client sends
// (as the kernel would accept it) and connects to the target only once
// bytes may flow.
func (b *Blackhole) serve(client net.Conn) {
	defer b.untrack(client)
	fromClient := b.read(client)
	var held [][]byte
wait:
	for {
		select {
		case <-b.gate():
			break wait
		case chunk, ok := <-fromClient:
			if ok {
				held = append(held, chunk)
				continue
			}
			select {
			case <-b.gate():
				break wait // sent and closed while bytes flow: deliver it
			default:
				return // gave up before it was answered: never reached the server
			}
		case <-b.closed:
			return
		}
	}
	server, err := net.Dial("tcp", b.target)
	if err != nil {
		return
	}
	if !b.track(server) {
		return
	}
	defer b.untrack(server)
	var wg sync.WaitGroup
	wg.Go(func() { b.forward(server, held, fromClient) })
	wg.Go(func() { b.forward(client, nil, b.read(server)) })
	wg.Wait()
}

// read returns the chunks read from c; closed at EOF or error.
func (b *Blackhole) read(c net.Conn) <-chan []byte {
	out := make(chan []byte, 16)
	go func() {
		defer close(out)
		for {
			buf := make([]byte, 32<<10)
			n, err := c.Read(buf)
			if n > 0 {
				select {
				case out <- buf[:n]:
				case <-b.closed:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// forward writes held, then every chunk, to dst, each once bytes may flow;
// at the end of chunks it closes dst's sending side.
func (b *Blackhole) forward(dst net.Conn, held [][]byte, chunks <-chan []byte) {
	write := func(p []byte) bool {
		if !b.pass() {
			return false
		}
		_, err := dst.Write(p)
		return err == nil
	}
	for _, p := range held {
		if !write(p) {
			return
		}
	}
	for p := range chunks {
		if !write(p) {
			return
		}
	}
	if !b.pass() {
		return
	}
	if tcp, ok := dst.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
}

func (b *Blackhole) close() {
	b.mu.Lock()
	select {
	case <-b.closed:
		b.mu.Unlock()
		return
	default:
	}
	close(b.closed)
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.ln.Close()
	b.wg.Wait()
}
