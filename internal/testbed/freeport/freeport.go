// Package freeport picks TCP ports on 127.0.0.1 for servers that a test or the testbed starts
// as processes of their own, which bind the port some seconds after it was picked.
//
// A port the kernel hands out for "127.0.0.1:0" comes from the ephemeral range, the range the
// kernel also takes the local port of every outgoing connection from: on a busy machine (test
// packages in parallel, each with API servers and clients) an outgoing connection can take the
// port between the pick and the server's bind, and the server fails with "address already in
// use". So a port is picked at random below the ephemeral range, where no outgoing connection
// takes one, is checked free by listening on it, and is reserved for the other processes that
// pick ports with this package (an abstract Unix socket named after it, held for a while and
// released with the process) until its server has had the time to bind it.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Reservation is how long a picked port stays reserved against other pickers: long enough for
// an API server to start and bind it. Once it is bound, the check by listening protects it.
const Reservation = 3 * time.Minute

// low is the lowest port picked: above the well-known and most registered service ports.
const low = 10000

// tries is how many random ports Ports tries for each port before it gives up.
const tries = 200

// Ports returns n distinct ports on 127.0.0.1 that nothing listens on now, outside the
// kernel's ephemeral range, reserved against other pickers for Reservation.
func Ports(n int) ([]int, error) {
	lo, hi := pickRange()
	ports := make([]int, 0, n)
	seen := map[int]bool{}
	for len(ports) < n {
		p, err := pick(lo, hi, seen)
		if err != nil {
			return nil, err
		}
		seen[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// Addr returns "127.0.0.1:PORT" with a port as Ports picks it.
func Addr() (string, error) {
	ps, err := Ports(1)
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(ps[0]), nil
}

func pick(lo, hi int, seen map[int]bool) (int, error) {
	for range tries {
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		if !reserve(p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	// The range is crowded or cannot be read right: a port from the kernel, as before.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// reserve takes the port's reservation; false when another process (or this one) holds it.
// Where there are no abstract Unix sockets, every port counts as not reserved.
func reserve(port int) bool {
	if runtime.GOOS != "linux" {
		return true
	}
	l, err := net.Listen("unix", "@rewind-freeport-"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	time.AfterFunc(Reservation, func() { l.Close() })
	return true
}

// pickRange is [low, start of the ephemeral range), or [low, 32768) when the range cannot be
// read (Linux's default range starts there).
func pickRange() (int, int) {
	hi := 32768
	if start, err := ephemeralStart(); err == nil && start > low+1000 {
		hi = start
	}
	return low, hi
}

func ephemeralStart() (int, error) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0, errors.New("unexpected ip_local_port_range")
	}
	return strconv.Atoi(f[0])
}
