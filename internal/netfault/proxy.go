package netfault

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Direction is one way of a proxied connection.
type Direction uint8

// The directions of a connection through a Proxy.
const (
	// Upstream is from the client that dialled the proxy to the target.
	Upstream Direction = 1 << iota
	// Downstream is from the target back to the client.
	Downstream
	// Both is either way.
	Both = Upstream | Downstream
)

// dialTimeout bounds the proxy's dial of its target.
const dialTimeout = 5 * time.Second

// Proxy forwards the TCP connections made to its loopback address to a
// target, and can stall, cut or hold one direction of them. The zero value
// is not usable: Start one.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex    // guards every field below
	blocked Direction     // directions that move no byte
	cut     bool          // connections are reset, new ones at once
	changed chan struct{} // closed and replaced at every change of the fields above
	conns   map[*link]struct{}
	closed  bool

	wg sync.WaitGroup
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	client, target net.Conn
}

// Start listens on a free port of 127.0.0.1 and forwards every connection
// to target (host:port). Close stops it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), conns: make(map[*link]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address, host:port, on 127.0.0.1.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Stall stops every byte either way, on the connections open and on new
// ones, with the sockets left open: the link has gone quiet, as a network
// that drops every packet looks to both ends until a timeout. A sender
// fills its socket buffers and then blocks.
func (p *Proxy) Stall() { p.Block(Both) }

// Block stops the bytes of the directions d (on top of those already
// blocked); the other direction keeps flowing. What a side wrote meanwhile
// is held, not lost: it is delivered after Heal.
func (p *Proxy) Block(d Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked |= d
	p.changedLocked()
}

// Cut resets every connection (the ends read a connection reset) and
// resets every new one at once, until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.changedLocked()
	conns := p.takeConnsLocked()
	p.mu.Unlock()
	for _, l := range conns {
		l.reset()
	}
}

// Heal undoes Stall, Block and Cut: held bytes flow again and new
// connections are forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked == 0 && !p.cut {
		return
	}
	p.blocked, p.cut = 0, false
	p.changedLocked()
}

// Faulty reports whether a fault is in force.
func (p *Proxy) Faulty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocked != 0 || p.cut
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.changedLocked()
	conns := p.takeConnsLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range conns {
		l.close()
	}
	p.wg.Wait()
	return err
}

// changedLocked wakes every copy waiting for a change.
func (p *Proxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) takeConnsLocked() []*link {
	conns := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		conns = append(conns, l)
	}
	clear(p.conns)
	return conns
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve dials the target for one client connection and copies both ways.
func (p *Proxy) serve(client net.Conn) {
	p.mu.Lock()
	cut, closed := p.cut, p.closed
	p.mu.Unlock()
	if cut || closed {
		resetConn(client)
		return
	}
	target, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		resetConn(client)
		return
	}
	l := &link{client: client, target: target}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		l.reset()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { p.copy(target, client, Upstream) })
	wg.Go(func() { p.copy(client, target, Downstream) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
	l.close()
}

// copy moves bytes from src to dst while direction d is not blocked. When
// it is, the copy neither reads nor writes, so that the sender's socket
// buffers fill as they would on a dead link.
func (p *Proxy) copy(dst, src net.Conn, d Direction) {
	buf := make([]byte, 32<<10)
	for {
		if !p.wait(d) {
			break
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(d) {
				break
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if errors.Is(err, io.EOF) {
			// The sender is done writing: so is this direction, as a TCP
			// peer would see it; the other direction goes on.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
		if err != nil {
			break
		}
	}
	_ = src.Close()
	_ = dst.Close()
}

// wait returns once direction d may move bytes, or false if the proxy was
// cut or closed.
func (p *Proxy) wait(d Direction) bool {
	for {
		p.mu.Lock()
		blocked, gone, changed := p.blocked&d != 0, p.cut || p.closed, p.changed
		p.mu.Unlock()
		if gone {
			return false
		}
		if !blocked {
			return true
		}
		<-changed
	}
}

func (l *link) reset() {
	resetConn(l.client)
	resetConn(l.target)
}

func (l *link) close() {
	_ = l.client.Close()
	_ = l.target.Close()
}

// resetConn closes c so that its peer reads a connection reset rather than
// an end of stream.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
