package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: `getconf CLK_TCK`, 100 on Linux if that fails.
var clockTicks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
})

// cpuTime returns the user plus system CPU time of process pid, all of its
// threads, from /proc/<pid>/stat (in clock ticks: 10 ms at USER_HZ 100).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// fields 3 on follow the last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / time.Duration(clockTicks()), nil
}

// memory is a process's resident memory, from /proc/<pid>/status.
type memory struct {
	rss  uint64 // VmRSS, bytes
	peak uint64 // VmHWM, the highest VmRSS so far, bytes
}

func memStatus(pid int) (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	var m memory
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("/proc/%d/status: %q", pid, line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("/proc/%d/status: %w", pid, err)
		}
		if name == "VmRSS" {
			m.rss = kb << 10
		} else {
			m.peak = kb << 10
		}
	}
	return m, nil
}

// usage is a sample of CPU time: the test's processes and the machine.
type usage struct {
	worker, nats, self time.Duration // user+system of each process
	busy, total        time.Duration // of the whole machine, every CPU: busy (steal included) and all
}

// readUsage samples the CPU time of the worker (pid 0: none), nats-server,
// this program and the machine.
func readUsage(workerPID, natsPID int) (u usage, err error) {
	if workerPID != 0 {
		if u.worker, err = cpuTime(workerPID); err != nil {
			return u, err
		}
	}
	if u.nats, err = cpuTime(natsPID); err != nil {
		return u, err
	}
	if u.self, err = cpuTime(os.Getpid()); err != nil {
		return u, err
	}
	u.busy, u.total, err = machineTime()
	return u, err
}

func (u usage) sub(v usage) usage {
	return usage{worker: u.worker - v.worker, nats: u.nats - v.nats, self: u.self - v.self, busy: u.busy - v.busy, total: u.total - v.total}
}

// othersShare returns the share of the machine's CPU that processes outside
// the test used (or the hypervisor stole): the noise of a measurement.
func (u usage) othersShare() float64 {
	if u.total <= 0 {
		return 0
	}
	return max(float64(u.busy-u.worker-u.nats-u.self)/float64(u.total), 0)
}

// machineTime returns the busy and total CPU time of every CPU, from the
// first line of /proc/stat: user nice system idle iowait irq softirq steal.
func machineTime() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: %q", line)
	}
	var ticks [8]int64
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	var all int64
	for _, t := range ticks {
		all += t
	}
	idle := ticks[3] + ticks[4]
	tick := time.Second / time.Duration(clockTicks())
	return time.Duration(all-idle) * tick, time.Duration(all) * tick, nil
}
