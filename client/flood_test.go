package client_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/state"
)

// peakRSS returns the process's peak RSS in bytes since the last
// resetPeak (VmHWM).
func peakRSS(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(tb, err)
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(tb, err)
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// TestFloodFigures floods a watch with 1 MB forged updates for
// FLOWSTATE_FLOOD_SECS seconds and prints the process's peak RSS and how
// soon after the flood the watch reached the worker's revision (the
// figures of docs/clients.md). The NATS server is the binary named by
// FLOWSTATE_NATS_SERVER_BIN (make nats-server), so that the RSS is the
// client's and the in-process worker's; the flood comes from a raw
// connection. Skipped unless both are set.
func TestFloodFigures(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("FLOWSTATE_FLOOD_SECS"))
	bin := os.Getenv("FLOWSTATE_NATS_SERVER_BIN")
	if secs <= 0 || bin == "" {
		t.Skip("set FLOWSTATE_FLOOD_SECS and FLOWSTATE_NATS_SERVER_BIN to measure")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	srv := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	for deadline := time.Now().Add(waitTimeout); ; {
		if nc, err = nats.Connect(url); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	wnc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(wnc.Close)
	worker, err := consumer.New(wnc, state.NewManager(state.Options{}), consumer.Config{})
	require.NoError(t, err)
	require.NoError(t, worker.Start())
	t.Cleanup(func() { _ = worker.Shutdown(testCtx(t)) })

	pending, _ := strconv.Atoi(os.Getenv("FLOWSTATE_FLOOD_PENDING")) // 0: the default
	c, err := client.New(nc, client.Options{MaxPendingBytes: pending})
	require.NoError(t, err)
	first := mustSend(t, c, report(1, 10, 1000, 1))
	w := startWatch(t, c, nil)
	w.until(t, func(s client.State) bool { return s.Version == first })

	require.NoError(t, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
	base := peakRSS(t)
	raw, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	defer raw.Close()
	rd := bufio.NewReader(raw)
	_, err = rd.ReadString('\n') // INFO
	require.NoError(t, err)
	_, err = raw.Write([]byte("CONNECT {\"verbose\":false,\"headers\":true}\r\n"))
	require.NoError(t, err)
	// The body and its CRLF, made once: the sender allocates nothing per
	// update, so that the RSS is the client's.
	frame := append(make([]byte, 1_000_000, 1_000_002), '\r', '\n')
	start := time.Now()
	sent := 0
	for time.Since(start) < time.Duration(secs)*time.Second {
		sent++
		hdr := fmt.Sprintf("NATS/1.0\r\nFlow-State-Epoch: forged\r\nFlow-State-Revision: %d\r\nFlow-State-Base-Revision: 0\r\n\r\n", sent)
		_, err = fmt.Fprintf(raw, "HPUB flow.state.delta %d %d\r\n%s", len(hdr), len(hdr)+len(frame)-2, hdr)
		require.NoError(t, err)
		_, err = raw.Write(frame)
		require.NoError(t, err)
	}
	_, err = raw.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	for {
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "PONG") {
			break
		}
	}
	flood, end := time.Since(start), time.Now()
	second := mustSend(t, c, report(1, 7, 2000, 1))
	w.until(t, func(s client.State) bool { return s.Version == second })
	fmt.Printf("FIGURES go flood: %d updates of 1 MB in %.1fs; peak RSS %.1f MB above the %.1f MB before; the watch reached the worker's revision %v after the flood\n",
		sent, flood.Seconds(), float64(peakRSS(t)-base)/1e6, float64(base)/1e6, time.Since(end).Round(time.Millisecond))
}
