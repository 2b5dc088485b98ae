// Package health reads a guest's live health: the heartbeat lines the seed's
// reporter agent keeps writing to the report channel after its first-boot
// report (internal/seed/reporter.py), and nothing else. The guest writes a
// heartbeat as soon as a reader opens the channel and then every interval
// while one stays, and drops them while nobody reads, so a read costs the
// guest nothing until it is asked and is answered within about a second.
package health

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Kind is the "kind" of a heartbeat line; the first-boot report has none.
const Kind = "heartbeat"

// MaxLine bounds a heartbeat line; the agent keeps its lines far smaller.
const MaxLine = 16 << 10

// Heartbeat is one heartbeat of the guest.
type Heartbeat struct {
	// Seq counts the heartbeats the agent wrote since it started.
	Seq int64
	// Time is the guest's clock when it wrote the heartbeat.
	Time time.Time
	// ReceivedAt is the host side's clock when the line was read.
	ReceivedAt time.Time
	// Interval is the agent's interval while a reader stays.
	Interval time.Duration
	// InstanceID and Hostname as the guest knows them.
	InstanceID, Hostname string
	// Uptime of the guest, its load averages (1, 5, 15 min) and CPUs online.
	Uptime time.Duration
	Load   [3]float64
	CPUs   int64
	// MemoryTotalKiB and MemoryAvailableKiB are /proc/meminfo's MemTotal
	// and MemAvailable.
	MemoryTotalKiB, MemoryAvailableKiB int64
	// DiskPath is the file system measured ("/"), with its size and free
	// bytes (what an unprivileged user can still write).
	DiskPath                      string
	DiskTotalBytes, DiskFreeBytes int64
	// CloudInit is "done", "error" or "running".
	CloudInit string
	// GPUs from nvidia-smi; none when the guest has no NVIDIA driver.
	GPUs []GPU
	// AgentCPU is the CPU time the agent used since it started, and
	// AgentStarted when it started (guest clock).
	AgentCPU     time.Duration
	AgentStarted time.Time
	// Bytes is the size of the line as written.
	Bytes int
}

// GPU is one GPU as nvidia-smi reports it; a value nvidia-smi could not
// give ("[N/A]") is negative.
type GPU struct {
	Index                         int64
	Name, DriverVersion           string
	UtilizationPercent            float64
	MemoryUsedMiB, MemoryTotalMiB int64
	TemperatureC, PowerW          float64
}

// Age is how old the heartbeat was when it was read, by the guest's clock
// against the host side's (never negative: a guest clock ahead reads as 0).
func (h *Heartbeat) Age() time.Duration {
	return max(0, h.ReceivedAt.Sub(h.Time))
}

// wire is the heartbeat line as reporter.py writes it.
type wire struct {
	Kind       string     `json:"kind"`
	Seq        int64      `json:"seq"`
	Time       float64    `json:"time"`
	Interval   float64    `json:"interval"`
	InstanceID string     `json:"instance_id"`
	Hostname   string     `json:"hostname"`
	Uptime     float64    `json:"uptime"`
	Load       []float64  `json:"load"`
	CPUs       int64      `json:"cpus"`
	Memory     *wireMem   `json:"memory"`
	Disk       *wireDisk  `json:"disk"`
	CloudInit  string     `json:"cloud_init"`
	GPUs       []wireGPU  `json:"gpus"`
	Agent      *wireAgent `json:"agent"`
}

type wireMem struct {
	TotalKiB     int64 `json:"total_kib"`
	AvailableKiB int64 `json:"available_kib"`
}

type wireDisk struct {
	Path  string `json:"path"`
	Total int64  `json:"total_bytes"`
	Free  int64  `json:"free_bytes"`
}

type wireGPU struct {
	Index         int64    `json:"index"`
	Name          string   `json:"name"`
	DriverVersion string   `json:"driver_version"`
	Utilization   *float64 `json:"utilization_percent"`
	MemoryUsed    *float64 `json:"memory_used_mib"`
	MemoryTotal   *float64 `json:"memory_total_mib"`
	Temperature   *float64 `json:"temperature_c"`
	Power         *float64 `json:"power_watts"`
}

type wireAgent struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	Started    float64 `json:"started"`
}

// ErrNotHeartbeat says a line is not a heartbeat (the first-boot report,
// or noise).
var ErrNotHeartbeat = errors.New("not a heartbeat")

// IsHeartbeat reports cheaply whether a channel line is a heartbeat, so the
// first-boot report's reader can skip heartbeats without parsing them.
func IsHeartbeat(line []byte) bool {
	line = bytes.TrimSpace(line)
	return len(line) > 0 && line[0] == '{' &&
		(bytes.Contains(line, []byte(`"kind":"heartbeat"`)) || bytes.Contains(line, []byte(`"kind": "heartbeat"`)))
}

// Parse reads one heartbeat line. A line that is JSON of another kind gives
// ErrNotHeartbeat; a heartbeat missing what every heartbeat has (its time,
// the guest's memory, CPUs) is malformed.
func Parse(line []byte) (*Heartbeat, error) {
	line = bytes.TrimSpace(line)
	if len(line) > MaxLine {
		return nil, fmt.Errorf("a heartbeat line of %d bytes is over the %d-byte limit", len(line), MaxLine)
	}
	var w wire
	if err := json.Unmarshal(line, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotHeartbeat, err)
	}
	if w.Kind != Kind {
		return nil, ErrNotHeartbeat
	}
	var missing []string
	if w.Time <= 0 {
		missing = append(missing, "time")
	}
	if w.Memory == nil || w.Memory.TotalKiB <= 0 {
		missing = append(missing, "memory")
	}
	if w.CPUs <= 0 {
		missing = append(missing, "cpus")
	}
	if len(w.Load) != 3 {
		missing = append(missing, "load")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("malformed heartbeat: no valid %s", strings.Join(missing, ", "))
	}
	h := &Heartbeat{
		Seq: w.Seq, Time: unixTime(w.Time), Interval: seconds(w.Interval),
		InstanceID: w.InstanceID, Hostname: w.Hostname, Uptime: seconds(w.Uptime),
		CPUs: w.CPUs, MemoryTotalKiB: w.Memory.TotalKiB, MemoryAvailableKiB: w.Memory.AvailableKiB,
		CloudInit: w.CloudInit, Bytes: len(line),
	}
	copy(h.Load[:], w.Load)
	if d := w.Disk; d != nil {
		h.DiskPath, h.DiskTotalBytes, h.DiskFreeBytes = d.Path, d.Total, d.Free
	}
	if a := w.Agent; a != nil {
		h.AgentCPU = seconds(a.CPUSeconds)
		if a.Started > 0 {
			h.AgentStarted = unixTime(a.Started)
		}
	}
	for _, g := range w.GPUs {
		h.GPUs = append(h.GPUs, GPU{
			Index: g.Index, Name: g.Name, DriverVersion: g.DriverVersion,
			UtilizationPercent: orNA(g.Utilization), MemoryUsedMiB: int64(orNA(g.MemoryUsed)),
			MemoryTotalMiB: int64(orNA(g.MemoryTotal)), TemperatureC: orNA(g.Temperature), PowerW: orNA(g.Power),
		})
	}
	return h, nil
}

func orNA(v *float64) float64 {
	if v == nil {
		return -1
	}
	return *v
}

func unixTime(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9))
}

func seconds(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) || s > 1e9 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// ChannelReader reads a domain's channel (virt.Client).
type ChannelReader interface {
	ReadChannel(ctx context.Context, domain, channel string, line func([]byte) bool) error
	DomainState(ctx context.Context, domain string) (string, error)
}

// SilentError is a read that got no heartbeat within its bound.
type SilentError struct {
	Domain string
	Waited time.Duration
	// State is the domain's state when the read gave up ("" if unknown).
	State string
	// Last is the last thing that went wrong: a line that was not a
	// heartbeat, or the channel's own error.
	Last error
}

func (e *SilentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "VM %s sent no heartbeat within %s", e.Domain, e.Waited.Round(100*time.Millisecond))
	switch e.State {
	case "running", "":
		b.WriteString(". The domain is running, so the guest's agent is not writing: check `systemctl status " +
			"kohaku-report` in the guest, and that its seed has heartbeat_interval above 0 and report_channel " +
			"on (a seed made before heartbeats, or with phone_home_reporter alone, has no agent)")
	default:
		fmt.Fprintf(&b, ". The domain is %s", e.State)
	}
	if e.Last != nil {
		fmt.Fprintf(&b, ". Last: %v", e.Last)
	}
	return b.String()
}

// Read returns the first heartbeat the domain's guest writes to channel
// within bound. A domain that is not running fails at once.
func Read(ctx context.Context, r ChannelReader, domain, channel string, bound time.Duration) (*Heartbeat, error) {
	start := time.Now()
	if st, err := r.DomainState(ctx, domain); err != nil {
		return nil, err
	} else if st != "running" && st != "blocked" {
		return nil, &SilentError{Domain: domain, State: st, Last: errors.New("only a running guest sends heartbeats")}
	}
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var hb *Heartbeat
	var last error
	for {
		err := r.ReadChannel(rctx, domain, channel, func(line []byte) bool {
			h, perr := Parse(line)
			switch {
			case errors.Is(perr, ErrNotHeartbeat):
				// the first-boot report, or a partial line
			case perr != nil:
				last = perr
			default:
				h.ReceivedAt = time.Now()
				hb = h
				return true
			}
			return false
		})
		if hb != nil {
			return hb, nil
		}
		if err != nil && rctx.Err() == nil {
			last = err
		}
		if rctx.Err() != nil || ctx.Err() != nil {
			break
		}
		// The stream ended early (the domain stopped, the connection
		// dropped): try again while time is left.
		select {
		case <-rctx.Done():
		case <-time.After(500 * time.Millisecond):
			continue
		}
		break
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	se := &SilentError{Domain: domain, Waited: time.Since(start), Last: last}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer scancel()
	if st, err := r.DomainState(sctx, domain); err == nil {
		se.State = st
	}
	return nil, se
}
