package teststores

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestProxyClosesConnectionsAcceptedAfterClose hands the proxy a connection after close has
// run (as one accepted while close runs would be): both it and the upstream connection the
// proxy dialled are closed at once instead of being forwarded and left open.
func TestProxyClosesConnectionsAcceptedAfterClose(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	upstream := make(chan net.Conn, 1)
	go func() {
		c, err := target.Accept()
		if err == nil {
			upstream <- c
		}
	}()
	p := StartProxy(t, target.Addr().String())
	p.close()

	client, late := net.Pipe()
	defer client.Close()
	go p.handle(late)

	deadline := time.Now().Add(10 * time.Second)
	if err := client.SetReadDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("reading from the late client connection: %v, want it closed by the proxy", err)
	}
	var up net.Conn
	select {
	case up = <-upstream:
	case <-time.After(time.Until(deadline)):
		t.Fatal("the proxy never dialled the target")
	}
	defer up.Close()
	if err := up.SetReadDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
		t.Fatalf("reading from the upstream connection: %v, want it closed by the proxy", err)
	}
}
