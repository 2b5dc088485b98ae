package seed

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/health"
)

// After its report the reporter stays as the heartbeat agent: heartbeats
// the provider's parser accepts, with the guest's memory, load, uptime,
// cloud-init state and GPUs (a stand-in nvidia-smi, one value "[N/A]"),
// one at once when a reader opens the channel and then one per interval,
// and none while nobody reads (the sequence goes on from where it stopped).
func TestReporterHeartbeats(t *testing.T) {
	t.Parallel()
	py := requireTool(t, "python3")
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for name, content := range map[string]string{
		"proc/meminfo":               "MemTotal:        2048000 kB\nMemFree:          100000 kB\nMemAvailable:    1536000 kB\n",
		"proc/loadavg":               "0.50 0.25 0.10 1/123 4567\n",
		"proc/uptime":                "1234.56 2000.00\n",
		"run/cloud-init/result.json": `{"v1": {"datasource": "DataSourceNoCloud", "errors": []}}`,
		"etc/resolv.conf":            "nameserver 10.0.2.3\n",
		"sys/class/net/eth0/address": "52:54:00:12:34:56\n",
		"bin/nvidia-smi":             "#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 550.54.14, 37, 1024, 81559, 41, 71.50'\necho '1, NVIDIA H100 80GB HBM3, 550.54.14, [N/A], 0, 81559, 30, [N/A]'\n",
		"var/lib/cloud/instance-id":  "iid-heartbeat\n",
		"etc/kohaku/status.json":     `{"status": "done", "errors": [], "datasource": "nocloud", "_schema_version": "1", "schemas": {"1": {}}}`,
		"etc/kohaku/report.json":     `{"url": "", "token": "tok", "heartbeat": 1}`,
		"proc/net/route":             "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n",
		"proc/net/ipv6_route":        "",
		"proc/mounts":                "/dev/vda / ext4 rw 0 0\n",
		"etc/kohaku/report.py":       string(reporterScript),
		"sys/class/net/lo/address":   "00:00:00:00:00:00\n",
		"proc/net/if_inet6":          "",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := filepath.Join(dir, "port")
	if err := syscall.Mkfifo(port, 0o600); err != nil {
		t.Fatal(err)
	}
	// The host side: O_RDWR never blocks on a FIFO and keeps it open for
	// the reporter's writes.
	open := func() (*os.File, *bufio.Reader) {
		f, err := os.OpenFile(port, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f, bufio.NewReaderSize(f, health.MaxLine)
	}
	f, r := open()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, py, filepath.Join(root, "etc/kohaku/report.py"))
	cmd.Env = append(os.Environ(),
		"KOHAKU_REPORT_CONFIG="+filepath.Join(root, "etc/kohaku/report.json"),
		"KOHAKU_REPORT_PORT="+port,
		"KOHAKU_REPORT_STATE="+filepath.Join(root, "var/lib/kohaku"),
		"KOHAKU_REPORT_SAVE="+filepath.Join(root, "run/kohaku/report.json"),
		"KOHAKU_REPORT_INSTANCE="+filepath.Join(root, "var/lib/cloud/instance-id"),
		"KOHAKU_REPORT_STATUS_CMD=cat "+filepath.Join(root, "etc/kohaku/status.json"),
		"KOHAKU_REPORT_ROOT="+root,
		"KOHAKU_REPORT_IP=kohaku-no-such-ip",
		"KOHAKU_REPORT_RESOLVECTL=kohaku-no-such-resolvectl",
		"KOHAKU_REPORT_HOSTNAME=hb-guest",
		"KOHAKU_REPORT_NVIDIA_SMI="+filepath.Join(root, "bin/nvidia-smi"),
		"KOHAKU_REPORT_TICK=0.1",
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("reporter stderr:\n%s", stderr.String())
		}
	}()

	type got struct {
		hb  *health.Heartbeat
		err error
	}
	// next reads lines until a heartbeat, skipping the report and blanks.
	next := func(r *bufio.Reader, within time.Duration) (*health.Heartbeat, bool) {
		t.Helper()
		ch := make(chan got, 1)
		go func() {
			for {
				line, err := r.ReadBytes('\n')
				if err != nil {
					ch <- got{err: err}
					return
				}
				if !health.IsHeartbeat(line) {
					continue
				}
				hb, err := health.Parse(line)
				ch <- got{hb, err}
				return
			}
		}()
		select {
		case g := <-ch:
			if g.err != nil {
				t.Fatalf("reading heartbeats: %v", g.err)
			}
			return g.hb, true
		case <-time.After(within):
			return nil, false
		}
	}

	first, ok := next(r, 30*time.Second)
	if !ok {
		t.Fatal("no heartbeat within 30 s of the report")
	}
	if first.Seq != 1 || first.InstanceID != "iid-heartbeat" || first.Hostname != "hb-guest" ||
		first.MemoryTotalKiB != 2048000 || first.MemoryAvailableKiB != 1536000 ||
		first.Load != [3]float64{0.5, 0.25, 0.1} || first.Uptime != 1234560*time.Millisecond ||
		first.CloudInit != "done" || first.CPUs < 1 || first.Interval != time.Second ||
		first.DiskPath != "/" || first.DiskTotalBytes <= 0 || first.DiskFreeBytes <= 0 || first.DiskFreeBytes > first.DiskTotalBytes {
		t.Errorf("first heartbeat = %+v", first)
	}
	if age := time.Since(first.Time); age < -time.Second || age > 30*time.Second {
		t.Errorf("heartbeat time %s is not the guest's clock now", first.Time)
	}
	if len(first.GPUs) != 2 {
		t.Fatalf("GPUs = %+v, want the stand-in's two", first.GPUs)
	}
	g0, g1 := first.GPUs[0], first.GPUs[1]
	if g0.Index != 0 || g0.Name != "NVIDIA H100 80GB HBM3" || g0.DriverVersion != "550.54.14" || g0.UtilizationPercent != 37 ||
		g0.MemoryUsedMiB != 1024 || g0.MemoryTotalMiB != 81559 || g0.TemperatureC != 41 || g0.PowerW != 71.5 {
		t.Errorf("GPU 0 = %+v", g0)
	}
	if g1.Index != 1 || g1.UtilizationPercent != -1 || g1.PowerW != -1 || g1.TemperatureC != 30 {
		t.Errorf("GPU 1 ([N/A] values) = %+v", g1)
	}
	if first.Bytes <= 0 || first.Bytes > 4096 {
		t.Errorf("a heartbeat of %d bytes", first.Bytes)
	}

	// While the reader stays: one per interval, numbered in order.
	second, ok := next(r, 10*time.Second)
	if !ok || second.Seq != 2 || !second.Time.After(first.Time) {
		t.Fatalf("second heartbeat = %+v (ok %v)", second, ok)
	}

	// Nobody reads for several intervals: nothing is written (or queued).
	f.Close()
	time.Sleep(3 * time.Second)
	f, r = open()
	defer f.Close()
	third, ok := next(r, 10*time.Second)
	if !ok {
		t.Fatal("no heartbeat after the reader came back")
	}
	if third.Seq != second.Seq+1 {
		t.Errorf("after a pause with no reader the heartbeat is number %d, want %d (heartbeats were written while nobody read)", third.Seq, second.Seq+1)
	}
}
