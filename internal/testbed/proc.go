package testbed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessRecord identifies one process the testbed started. It is written to the state file so
// that `rewind testbed down` (another process) can stop exactly what `up` started.
type ProcessRecord struct {
	// Name says what the process is, e.g. "kube-apiserver/member1".
	Name string `json:"name"`
	// PID is the process id; the process leads its own process group, so it is also the group id.
	PID int `json:"pid"`
	// StartTime is the process start time in clock ticks since boot (/proc/PID/stat field 22).
	// It guards against stopping an unrelated process that reused the id.
	StartTime uint64 `json:"startTime"`
}

// process is a running child process.
type process struct {
	rec     ProcessRecord
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been reaped (attached mode only)
	logFile *os.File
}

// startProcess starts bin with args in its own process group, logging to logPath, with this
// process's environment plus env. When attached, the child is killed if this process dies
// (PDEATHSIG) and is reaped by a goroutine.
func startProcess(name, bin string, args []string, logPath string, attached bool, env ...string) (*process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = lf
	cmd.Stderr = lf
	cmd.Env = append(append(os.Environ(), "GOMAXPROCS=2"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if attached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{cmd: cmd, logFile: lf, rec: ProcessRecord{Name: name, PID: cmd.Process.Pid}}
	p.rec.StartTime, _ = procStartTime(p.rec.PID)
	if attached {
		p.done = make(chan struct{})
		go func() {
			_ = cmd.Wait()
			lf.Close()
			close(p.done)
		}()
	} else {
		_ = cmd.Process.Release()
		lf.Close()
	}
	return p, nil
}

// exited reports whether an attached process has ended.
func (p *process) exited() bool {
	if p.done == nil {
		return !Alive(p.rec)
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// procStartTime reads the start time of pid from /proc (field 22 of /proc/PID/stat).
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	// The command name (field 2) is in parentheses and may contain spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, errors.New("malformed /proc stat")
	}
	if fields[0] == "Z" {
		return 0, errors.New("zombie")
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// Alive reports whether the process of rec is still running (and is the same process: its
// start time matches). Zombies count as gone.
func Alive(rec ProcessRecord) bool {
	st, err := procStartTime(rec.PID)
	if err != nil {
		return false
	}
	return rec.StartTime == 0 || st == rec.StartTime
}

// GroupAlive reports whether any live (non-zombie) process is left in the process group pgid.
func GroupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, pgrp, err := procStateGroup(pid)
		if err == nil && pgrp == pgid && state != "Z" && state != "X" {
			return true
		}
	}
	return false
}

// procStateGroup reads the state and process group of pid from /proc/PID/stat.
func procStateGroup(pid int) (string, int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, errors.New("malformed /proc stat")
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 3 {
		return "", 0, errors.New("malformed /proc stat")
	}
	pgrp, err := strconv.Atoi(fields[2])
	return fields[0], pgrp, err
}

// stopRecord stops the process group led by rec: SIGTERM, then SIGKILL after grace. It only
// signals the group if its leader is still the process that was started (same start time), or
// if the leader is gone but members of its group remain.
func stopRecord(rec ProcessRecord, grace time.Duration, waitExit func(time.Duration) bool) {
	if rec.PID <= 1 {
		return
	}
	leaderAlive := Alive(rec)
	if !leaderAlive && !GroupAlive(rec.PID) {
		return
	}
	if !leaderAlive {
		// The leader exited, but processes it started may remain in its group.
		_ = syscall.Kill(-rec.PID, syscall.SIGKILL)
		return
	}
	_ = syscall.Kill(-rec.PID, syscall.SIGTERM)
	if waitExit(grace) {
		if GroupAlive(rec.PID) {
			_ = syscall.Kill(-rec.PID, syscall.SIGKILL)
		}
		return
	}
	_ = syscall.Kill(-rec.PID, syscall.SIGKILL)
	waitExit(5 * time.Second)
}

// stop stops the process and waits for it to be gone.
func (p *process) stop(grace time.Duration) {
	stopRecord(p.rec, grace, func(d time.Duration) bool {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if p.exited() {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return p.exited()
	})
}

// StopRecords stops the given processes (in reverse order of start) and waits until each is
// gone. It is what `rewind testbed down` runs against the state file.
func StopRecords(recs []ProcessRecord, grace time.Duration) {
	var wg sync.WaitGroup
	for i := len(recs) - 1; i >= 0; i-- {
		rec := recs[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopRecord(rec, grace, func(d time.Duration) bool {
				deadline := time.Now().Add(d)
				for time.Now().Before(deadline) {
					if !Alive(rec) {
						return true
					}
					time.Sleep(20 * time.Millisecond)
				}
				return !Alive(rec)
			})
		}()
	}
	wg.Wait()
}

// Cluster is the cluster a process serves (the part of its name after "/", e.g. "member1"
// for "kube-apiserver/member1"), or "" for etcd and the member proxy, which serve them all.
func (r ProcessRecord) Cluster() string {
	_, c, _ := strings.Cut(r.Name, "/")
	return c
}

// Memory is the resident memory of a process, from /proc/PID/status.
type Memory struct {
	// RSS is VmRSS: every resident page, including the pages of the program's file, which
	// every process running the same binary shares.
	RSS int64 `json:"rssBytes"`
	// Anon is RssAnon: the resident memory of this process alone (heap, stacks).
	Anon int64 `json:"rssAnonBytes"`
}

// ReadMemory reads the resident memory of the process of rec, or fails if it is not running.
func ReadMemory(rec ProcessRecord) (Memory, error) {
	if !Alive(rec) {
		return Memory{}, fmt.Errorf("%s (pid %d) is not running", rec.Name, rec.PID)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(rec.PID) + "/status")
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, v, _ := strings.Cut(line, ":")
		var dst *int64
		switch name {
		case "VmRSS":
			dst = &m.RSS
		case "RssAnon":
			dst = &m.Anon
		default:
			continue
		}
		f := strings.Fields(v) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("malformed line %q in /proc/%d/status", line, rec.PID)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, err
		}
		*dst = kb << 10
		found++
	}
	if found != 2 {
		return Memory{}, fmt.Errorf("no VmRSS or RssAnon in /proc/%d/status", rec.PID)
	}
	return m, nil
}
