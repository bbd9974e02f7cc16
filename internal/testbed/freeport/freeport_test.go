package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreBelowTheEphemeralRangeDistinctAndFree(t *testing.T) {
	start, err := ephemeralStart()
	if err != nil {
		t.Fatalf("reading the ephemeral range: %v", err)
	}
	ports, err := Ports(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < low || p >= start {
			t.Errorf("port %d is outside [%d, %d): outgoing connections can take it before its server binds it", p, low, start)
		}
		if seen[p] {
			t.Errorf("port %d picked twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}

func TestAPickedPortIsReservedAgainstOtherPickers(t *testing.T) {
	ports, err := Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	if reserve(ports[0]) {
		t.Fatalf("port %d was reserved again while its reservation holds: another test package could start a server on it", ports[0])
	}
}

func TestAPortInUseIsNotPicked(t *testing.T) {
	lo, hi := pickRange()
	// Listen on every port of a small range but one: the pick must find that one.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	free := -1
	for p := lo + 5000; p < lo+5010 && p < hi; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		if free < 0 {
			l.Close()
			free = p
			continue
		}
		ls = append(ls, l)
	}
	if free < 0 || len(ls) == 0 {
		t.Fatalf("no ports to listen on near %d", lo+5000)
	}
	got, err := pick(lo+5000, lo+5010, map[int]bool{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Addr().(*net.TCPAddr).Port == got {
			t.Fatalf("picked port %d, which is in use", got)
		}
	}
}
