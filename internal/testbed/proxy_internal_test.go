package testbed

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer accepts connections on a loopback port and copies what it reads back, until
// the client half-closes; it returns the address.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// proxyTo starts a latency proxy in front of target and returns its address.
func proxyTo(t *testing.T, p *latencyProxy, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Serve(l, target)
	return l.Addr().String()
}

func TestLatencyProxyDelaysAndKeepsOrder(t *testing.T) {
	const latency = 20 * time.Millisecond
	p := newLatencyProxy(latency)
	defer p.Close()
	conn, err := net.Dial("tcp", proxyTo(t, p, echoServer(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// One round trip: the bytes are delayed on the way in and on the way back.
	start := time.Now()
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 2*latency {
		t.Errorf("round trip through the proxy took %s, want >= %s", rtt, 2*latency)
	}

	// Many writes of different sizes come back whole and in order; then a half-close
	// reaches the server, whose own close comes back as end of file.
	var msgs [][]byte
	for i := range 2000 {
		msgs = append(msgs, bytes.Repeat([]byte{byte(i)}, 1+i%700))
	}
	want := bytes.Join(msgs, nil)
	go func() {
		for _, msg := range msgs {
			if _, err := conn.Write(msg); err != nil {
				return
			}
		}
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the proxy changed the stream: got %d bytes, want %d", len(got), len(want))
	}
}

func TestLatencyProxyCloseEndsConnections(t *testing.T) {
	p := newLatencyProxy(10 * time.Millisecond)
	addr := proxyTo(t, p, echoServer(t))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a connection open")
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err == nil {
		t.Errorf("the connection is still open after Close (read %d bytes)", n)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the proxy still accepts connections after Close")
	}
}
