package main

import (
	"bufio"
	"bytes"
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

// errInterrupted is returned once the harness was told to stop.
var errInterrupted = errors.New("interrupted")

// runner starts the harness's child processes, each in a process group of
// its own so that a Ctrl-C at the terminal reaches the harness only, and
// the harness then ends the child (and the providers Terraform started, in
// the same group) by that group's id.
type runner struct {
	mu          sync.Mutex
	cur         *exec.Cmd
	interrupted bool
}

// stop ends the running child group: SIGINT first, so Terraform can stop
// cleanly and release its state, then SIGKILL after grace.
func (r *runner) stop(grace time.Duration) {
	r.mu.Lock()
	r.interrupted = true
	cmd := r.cur
	r.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	pgid := cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGINT) //nolint:errcheck // the group may be gone
	time.AfterFunc(grace, func() {
		r.mu.Lock()
		still := r.cur == cmd
		r.mu.Unlock()
		if still {
			syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck // the group may be gone
		}
	})
}

func (r *runner) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.interrupted
}

// usage is what one measured command cost.
type usage struct {
	Wall float64 `json:"wall_s"`
	// ProviderRSSKiB is the largest VmHWM (peak resident set) of any
	// provider process seen while the command ran.
	ProviderRSSKiB int64 `json:"provider_peak_rss_kib,omitempty"`
	// ProviderCPU is user+system CPU of the provider processes (sum over
	// them, as last sampled).
	ProviderCPU float64 `json:"provider_cpu_s,omitempty"`
	// ChildCPU is user+system CPU of the command and the children it
	// reaped (for terraform: terraform plus its providers).
	ChildCPU float64 `json:"cmd_cpu_s"`
	// DaemonCPU is what libvirtd (with the qemu-img it ran) spent meanwhile.
	DaemonCPU float64 `json:"libvirtd_cpu_s"`
}

// run runs a command in dir with env added, logging its output to logPath,
// and measures it. exe, when set, is the provider binary whose processes
// are sampled for RSS and CPU. okCodes are exit codes that count as
// success besides 0.
func (r *runner) run(dir, logPath string, env []string, exe string, argv []string, okCodes ...int) (usage, int, error) {
	var u usage
	if r.stopped() {
		return u, 0, errInterrupted
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return u, 0, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "\n$ %s\n", strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	daemon0 := daemonCPU()
	r.mu.Lock()
	if r.interrupted {
		r.mu.Unlock()
		return u, 0, errInterrupted
	}
	start := time.Now()
	err = cmd.Start()
	if err == nil {
		r.cur = cmd
	}
	r.mu.Unlock()
	if err != nil {
		return u, 0, err
	}
	var s *sampler
	if exe != "" {
		s = newSampler(exe)
		go s.loop()
	}
	err = cmd.Wait()
	u.Wall = time.Since(start).Seconds()
	r.mu.Lock()
	r.cur = nil
	r.mu.Unlock()
	if s != nil {
		u.ProviderRSSKiB, u.ProviderCPU = s.finish()
	}
	u.DaemonCPU = daemonCPU() - daemon0
	if cmd.ProcessState != nil {
		u.ChildCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		for _, ok := range okCodes {
			if code == ok {
				err = nil
			}
		}
	}
	if r.stopped() {
		return u, code, errInterrupted
	}
	if err != nil {
		return u, code, fmt.Errorf("%s (in %s) failed: %v; last lines of %s:\n%s", strings.Join(argv, " "), dir, err, logPath, tail(logPath, 30))
	}
	return u, code, nil
}

// sampler polls /proc for processes running exe (the provider binary,
// whose path is unique to this harness run, so only our own providers
// match) and keeps each one's VmHWM and CPU time. VmHWM is the kernel's
// peak-RSS mark, so sampling misses no peak, only providers that live less
// than one period.
type sampler struct {
	exe  string
	done chan struct{}
	wg   sync.WaitGroup

	mu  sync.Mutex
	hwm map[int]int64
	cpu map[int]float64
}

const samplePeriod = 100 * time.Millisecond

func newSampler(exe string) *sampler {
	s := &sampler{exe: exe, done: make(chan struct{}), hwm: map[int]int64{}, cpu: map[int]float64{}}
	s.wg.Add(1)
	return s
}

func (s *sampler) loop() {
	defer s.wg.Done()
	t := time.NewTicker(samplePeriod)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-s.done:
			return
		case <-t.C:
		}
	}
}

func (s *sampler) sample() {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err != nil || link != s.exe {
			continue
		}
		hwm := statusKiB(pid, "VmHWM:")
		cpu := procCPU(pid, false)
		s.mu.Lock()
		if hwm > s.hwm[pid] {
			s.hwm[pid] = hwm
		}
		if cpu > s.cpu[pid] {
			s.cpu[pid] = cpu
		}
		s.mu.Unlock()
	}
}

func (s *sampler) finish() (peakKiB int64, cpu float64) {
	close(s.done)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, h := range s.hwm {
		peakKiB = max(peakKiB, h)
		cpu += s.cpu[pid]
	}
	return peakKiB, cpu
}

func statusKiB(pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// procCPU is a process's user+system CPU in seconds from /proc/<pid>/stat,
// with its reaped children's when children is set.
func procCPU(pid int, children bool) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
	if len(f) < 15 {
		return 0
	}
	n := 2
	if children {
		n = 4
	}
	var ticks int64
	for k := 0; k < n; k++ {
		v, _ := strconv.ParseInt(f[11+k], 10, 64)
		ticks += v
	}
	return float64(ticks) / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// daemonCPU is the CPU the libvirt daemons (libvirtd, or virtqemud and
// virtstoraged) and the children they reaped (qemu-img) have used so far.
func daemonCPU() float64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total float64
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "libvirtd", "virtqemud", "virtstoraged":
			total += procCPU(pid, true)
		}
	}
	return total
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
