package health

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// channel plays a domain's report channel: each open delivers the next
// batch of lines, then ends with err, or stays open until ctx ends.
type channel struct {
	mu      sync.Mutex
	batches [][]string
	err     error
	state   string
	opens   int
}

func (c *channel) ReadChannel(ctx context.Context, domain, name string, line func([]byte) bool) error {
	c.mu.Lock()
	c.opens++
	var b []string
	if len(c.batches) > 0 {
		b, c.batches = c.batches[0], c.batches[1:]
	}
	c.mu.Unlock()
	for _, l := range b {
		if line([]byte(l)) {
			return nil
		}
	}
	if c.err != nil {
		return c.err
	}
	<-ctx.Done()
	return ctx.Err()
}

func (c *channel) DomainState(context.Context, string) (string, error) {
	if c.state == "" {
		return "running", nil
	}
	return c.state, nil
}

const beat = `{"kind":"heartbeat","seq":7,"time":1700000000.25,"interval":10,"instance_id":"iid-1","hostname":"gpu-1",` +
	`"uptime":3600.5,"load":[1.5,1,0.5],"cpus":4,"memory":{"total_kib":4096000,"available_kib":2048000},` +
	`"disk":{"path":"/","total_bytes":10737418240,"free_bytes":5368709120},"cloud_init":"done",` +
	`"gpus":[{"index":0,"name":"NVIDIA H100","driver_version":"550.54.14","utilization_percent":12,"memory_used_mib":512,"memory_total_mib":81559,"temperature_c":40,"power_watts":null}],` +
	`"agent":{"cpu_seconds":0.42,"started":1699996400}}`

const report = `{"token":"t","instance_id":"iid-1","hostname":"gpu-1","cloud_init":{"status":"done","errors":[]}}`

func TestParse(t *testing.T) {
	h, err := Parse([]byte(beat + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Heartbeat{Seq: 7, Interval: 10 * time.Second, InstanceID: "iid-1", Hostname: "gpu-1",
		Uptime: 3600500 * time.Millisecond, Load: [3]float64{1.5, 1, 0.5}, CPUs: 4,
		MemoryTotalKiB: 4096000, MemoryAvailableKiB: 2048000, DiskPath: "/", DiskTotalBytes: 10 << 30, DiskFreeBytes: 5 << 30,
		CloudInit: "done", AgentCPU: 420 * time.Millisecond, Bytes: len(beat)}
	got := *h
	got.Time, got.AgentStarted, got.GPUs = time.Time{}, time.Time{}, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
	}
	if !h.Time.Equal(time.Unix(1700000000, 250e6)) || !h.AgentStarted.Equal(time.Unix(1699996400, 0)) {
		t.Errorf("times %s, %s", h.Time, h.AgentStarted)
	}
	if len(h.GPUs) != 1 || h.GPUs[0] != (GPU{Name: "NVIDIA H100", DriverVersion: "550.54.14", UtilizationPercent: 12,
		MemoryUsedMiB: 512, MemoryTotalMiB: 81559, TemperatureC: 40, PowerW: -1}) {
		t.Errorf("GPUs = %+v (a null value must read as -1)", h.GPUs)
	}
	h.ReceivedAt = h.Time.Add(1500 * time.Millisecond)
	if h.Age() != 1500*time.Millisecond {
		t.Errorf("Age = %s", h.Age())
	}
	h.ReceivedAt = h.Time.Add(-time.Hour) // a guest clock ahead of the host's
	if h.Age() != 0 {
		t.Errorf("Age with the guest ahead = %s, want 0", h.Age())
	}
}

func TestParseRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		line string
		not  bool
		msg  string
	}{
		"the first-boot report": {line: report, not: true},
		"not JSON":              {line: "garbage", not: true},
		"no memory":             {line: strings.Replace(beat, `"total_kib":4096000`, `"total_kib":0`, 1), msg: "no valid memory"},
		"no time or cpus":       {line: strings.NewReplacer(`"time":1700000000.25`, `"time":0`, `"cpus":4`, `"cpus":0`).Replace(beat), msg: "no valid time, cpus"},
		"short load":            {line: strings.Replace(beat, `[1.5,1,0.5]`, `[1.5]`, 1), msg: "no valid load"},
		"too long":              {line: beat[:len(beat)-1] + `,"pad":"` + strings.Repeat("x", MaxLine) + `"}`, msg: "over the"},
	} {
		_, err := Parse([]byte(c.line))
		switch {
		case err == nil:
			t.Errorf("%s: accepted", name)
		case c.not != errors.Is(err, ErrNotHeartbeat):
			t.Errorf("%s: %v (ErrNotHeartbeat: want %v)", name, err, c.not)
		case !strings.Contains(err.Error(), c.msg):
			t.Errorf("%s: %v, want it to say %q", name, err, c.msg)
		}
	}
}

func TestIsHeartbeat(t *testing.T) {
	for line, want := range map[string]bool{
		beat:                              true,
		"\n" + beat + "\n":                true,
		`{"kind": "heartbeat", "seq": 1}`: true,
		report:                            false,
		`"kind":"heartbeat"`:              false,
		"":                                false,
	} {
		if IsHeartbeat([]byte(line)) != want {
			t.Errorf("IsHeartbeat(%.40q) != %v", line, want)
		}
	}
}

// The first heartbeat is returned past the report and noise; a stream that
// ends early is reopened.
func TestReadSkipsTheReportAndReopens(t *testing.T) {
	c := &channel{batches: [][]string{{report, "", "garbage"}, {report, beat}}, err: errors.New("the channel was closed")}
	h, err := Read(context.Background(), c, "vm", "org.kohaku.report.0", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != 7 || h.ReceivedAt.IsZero() || c.opens != 2 {
		t.Errorf("heartbeat %+v after %d opens", h, c.opens)
	}
}

// A running guest that writes no heartbeat: bounded, and the error says
// where to look; a malformed heartbeat is named as the last thing seen.
func TestReadSilentGuest(t *testing.T) {
	c := &channel{batches: [][]string{{report, strings.Replace(beat, `"cpus":4`, `"cpus":0`, 1)}}}
	start := time.Now()
	_, err := Read(context.Background(), c, "vm-1", "org.kohaku.report.0", 300*time.Millisecond)
	var se *SilentError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a SilentError", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the read took %s with a 300ms bound", d)
	}
	for _, want := range []string{"VM vm-1 sent no heartbeat within", "domain is running", "systemctl status kohaku-report", "heartbeat_interval", "malformed heartbeat: no valid cpus"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestReadStoppedDomain(t *testing.T) {
	c := &channel{state: "shut off"}
	_, err := Read(context.Background(), c, "vm-1", "org.kohaku.report.0", time.Minute)
	var se *SilentError
	if !errors.As(err, &se) || se.State != "shut off" || c.opens != 0 || !strings.Contains(err.Error(), "The domain is shut off") {
		t.Fatalf("err = %v after %d opens", err, c.opens)
	}
}
