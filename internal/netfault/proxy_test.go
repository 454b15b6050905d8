package netfault

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet is how long a read waits to conclude that no byte comes.
const quiet = 200 * time.Millisecond

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func startProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Start(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

type peer struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *peer {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &peer{c: c, r: bufio.NewReader(c)}
}

func (p *peer) send(t *testing.T, line string) {
	t.Helper()
	require.NoError(t, p.c.SetWriteDeadline(time.Now().Add(time.Second)))
	_, err := p.c.Write([]byte(line + "\n"))
	require.NoError(t, err)
}

// read returns the next line, or the error of a read that waited for d.
func (p *peer) read(d time.Duration) (string, error) {
	_ = p.c.SetReadDeadline(time.Now().Add(d))
	s, err := p.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return s[:len(s)-1], nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyForwardsBothWays(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p)
	c.send(t, "hello")
	got, err := c.read(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "hello", got)
	assert.False(t, p.Faulty())
}

func TestStalledLinkHoldsEveryByteUntilHealed(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p)
	c.send(t, "before")
	_, err := c.read(5 * time.Second)
	require.NoError(t, err)

	p.Stall()
	assert.True(t, p.Faulty())
	c.send(t, "during")
	_, err = c.read(quiet)
	require.True(t, isTimeout(err), "a stalled link delivered something: %v", err)
	late := dial(t, p) // a new connection is stalled too
	late.send(t, "new")
	_, err = late.read(quiet)
	require.True(t, isTimeout(err), "a new connection through a stalled link delivered something: %v", err)

	p.Heal()
	got, err := c.read(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "during", got, "the bytes held during the stall come after the heal")
	got, err = late.read(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "new", got)
}

func TestBlockedDirectionHoldsOnlyThatWay(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p)
	p.Block(Downstream)
	c.send(t, "up")
	_, err := c.read(quiet)
	require.True(t, isTimeout(err), "the echo came back through a blocked downstream: %v", err)
	p.Heal()
	got, err := c.read(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "up", got)
}

func TestCutResetsConnectionsAndRefusesNewOnesUntilHealed(t *testing.T) {
	p := startProxy(t)
	c := dial(t, p)
	c.send(t, "x")
	_, err := c.read(5 * time.Second)
	require.NoError(t, err)

	p.Cut()
	_, err = c.read(5 * time.Second)
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF), "want a reset, got %v", err)

	// A connection made during the cut is reset: at once, or at its first
	// read, depending on when the reset reaches the dialler.
	if refused, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Cleanup(func() { _ = refused.Close() })
		_ = refused.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = refused.Read(make([]byte, 1))
		require.Error(t, err, "a connection made during a cut was served")
		assert.False(t, isTimeout(err), "a connection made during a cut hung instead of being reset: %v", err)
	} else {
		assert.False(t, isTimeout(err), "a dial during a cut hung instead of being reset: %v", err)
	}

	p.Heal()
	again := dial(t, p)
	again.send(t, "back")
	got, err := again.read(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "back", got)
}
