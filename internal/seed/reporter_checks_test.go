package seed

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// guestFixture is a fake guest for the reporter's checks: files under a
// root (/proc, /sys, /etc, /run) and shell scripts standing in for ip and
// resolvectl.
type guestFixture struct {
	files map[string]string // path in the guest -> content
	// ip and resolvectl are shell script bodies; empty means the command
	// does not exist (an image without iproute2 or systemd-resolved).
	ip, resolvectl string
}

// reportFrom runs the embedded reporter against fx, configured with
// expect, and returns the report it wrote to its channel (a plain file
// here), parsed by the provider's own parser.
func reportFrom(t *testing.T, fx guestFixture, expect any, env ...string) *phonehome.Report {
	t.Helper()
	py := requireTool(t, "python3")
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for p, content := range fx.files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tool := func(name, body string) string {
		if body == "" {
			return filepath.Join(dir, "no-"+name)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := filepath.Join(dir, "report.py")
	if err := os.WriteFile(script, reporterScript, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"token": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd", "expect": expect})
	writeReporterFile(t, filepath.Join(dir, "report.json"), cfg, 0o600)
	writeReporterFile(t, filepath.Join(dir, "instance-id"), []byte("iid-checks\n"), 0o644)
	writeReporterFile(t, filepath.Join(dir, "status.json"), []byte(`{"status": "done", "errors": []}`), 0o644)
	port := filepath.Join(dir, "port")
	writeReporterFile(t, port, nil, 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script)
	cmd.Env = append(os.Environ(),
		"KOHAKU_REPORT_CONFIG="+filepath.Join(dir, "report.json"),
		"KOHAKU_REPORT_PORT="+port,
		"KOHAKU_REPORT_STATE="+filepath.Join(dir, "state"),
		"KOHAKU_REPORT_SAVE="+filepath.Join(dir, "run", "report.json"),
		"KOHAKU_REPORT_INSTANCE="+filepath.Join(dir, "instance-id"),
		"KOHAKU_REPORT_STATUS_CMD=cat "+filepath.Join(dir, "status.json"),
		"KOHAKU_REPORT_IP="+tool("ip", fx.ip),
		"KOHAKU_REPORT_RESOLVECTL="+tool("resolvectl", fx.resolvectl),
		"KOHAKU_REPORT_HOSTNAME=w16r-guest",
	)
	if fx.files != nil {
		cmd.Env = append(cmd.Env, "KOHAKU_REPORT_ROOT="+root)
	}
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reporter failed: %v\n%s", err, out)
	}
	b, err := os.ReadFile(port)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(filepath.Join(dir, "run", "report.json"))
	if err == nil {
		err = sameReportButStamp(saved, b)
	}
	if err != nil {
		t.Errorf("the report left for the guest agent is not the one delivered: %v\n%s\n%s", err, saved, b)
	}
	if st, err := os.Stat(filepath.Join(dir, "run", "report.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the saved report is not root-only: %v %v", st.Mode(), err)
	}
	rep, err := phonehome.ParseReport("application/json", []byte(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatalf("the provider would reject the report: %v\n%s", err, b)
	}
	if len(rep.Warnings) > 0 {
		t.Errorf("report warnings: %v", rep.Warnings)
	}
	return rep
}

// messages are the report's checks as the provider words them, by result.
func messages(rep *phonehome.Report, want phonehome.CheckResult) []string {
	var out []string
	for _, c := range rep.Checks {
		if c.Result == want {
			out = append(out, c.Message())
		}
	}
	return out
}

// ipAddrJSON is `ip -j addr show` of a guest with one NIC.
const ipAddrJSON = `[{"ifindex":1,"ifname":"lo","address":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
{"ifindex":2,"ifname":"enp1s0","address":"52:54:00:12:34:56","addr_info":[{"family":"inet","local":"10.0.2.15","prefixlen":24},{"family":"inet6","local":"fd00::15","prefixlen":64},{"family":"inet6","local":"fe80::5054:ff:fe12:3456","prefixlen":64}]}]`

var oneNICFiles = map[string]string{
	"/sys/class/net/lo/address":     "00:00:00:00:00:00\n",
	"/sys/class/net/enp1s0/address": "52:54:00:12:34:56\n",
	"/proc/mounts": "/dev/vda / ext4 rw,relatime 0 0\n" +
		"share /mnt/share 9p rw,trans=virtio 0 0\n" +
		"data /mnt/with\\040space virtiofs rw 0 0\n",
}

// declared is a seed's declaration as reporterFiles writes it: two NICs
// (the second's MAC is not in the guest), static IPv4 and IPv6 with
// gateways, two nameservers, a search domain, the hostname and three shares.
func declaredExpectation() Expectation {
	return Expectation{
		Hostname: "w16r-guest",
		NICs: []ExpectedNIC{
			{MAC: "52:54:00:12:34:56", Addresses: []string{"10.0.2.15/24", "fd00::15/64"}, Gateway4: "10.0.2.2", Gateway6: "fd00::2"},
			{MAC: "52:54:00:ab:cd:ef", DHCP4: true},
		},
		Nameservers: []string{"10.0.2.3", "192.0.2.53"},
		Search:      []string{"example.com"},
		Mounts:      []string{"/mnt/share", "/mnt/with space", "/mnt/missing"},
	}
}

// A Debian 12 guest's fault: the address is there, the IPv4 default
// route is not. Without iproute2's route listing the reporter reads
// /proc/net/route and /proc/net/ipv6_route, and names exactly what is
// missing: the IPv4 default route, the NIC whose MAC the guest lacks, a
// nameserver not in resolv.conf and a share not mounted.
func TestReporterChecksFindWhatIsMissing(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"/proc/net/route": "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
			"enp1s0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
		"/proc/net/ipv6_route": "" +
			"fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001   enp1s0\n" +
			"00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000002 00000400 00000002 00000000 00000003   enp1s0\n" +
			"00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n" +
			"ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000003 00000000 00000001   enp1s0\n",
		"/etc/resolv.conf": "# written by hand\nnameserver 10.0.2.3\nsearch example.com\n",
	}
	for k, v := range oneNICFiles {
		files[k] = v
	}
	// ip lists addresses but its route listing fails: the /proc fallback
	// must carry the routes.
	ip := `case "$*" in "-j addr show") cat <<'EOF'
` + ipAddrJSON + `
EOF
;; *) exit 1;; esac
`
	rep := reportFrom(t, guestFixture{files: files, ip: ip}, declaredExpectation())

	wantMismatch := []string{
		"no IPv4 default route via 10.0.2.2 on enp1s0 (52:54:00:12:34:56); found: none",
		"no interface with MAC 52:54:00:ab:cd:ef; found: enp1s0 (52:54:00:12:34:56)",
		"no nameserver 192.0.2.53; found: 10.0.2.3 (/etc/resolv.conf)",
		"no share mounted at /mnt/missing; found: not mounted",
	}
	if got := messages(rep, phonehome.CheckMismatch); !slices.Equal(got, wantMismatch) {
		t.Errorf("mismatches:\n got %q\nwant %q", got, wantMismatch)
	}
	wantOK := []string{
		"IPv4 address 10.0.2.15/24 on enp1s0 (52:54:00:12:34:56): ok",
		"IPv6 address fd00::15/64 on enp1s0 (52:54:00:12:34:56): ok",
		"IPv6 default route via fd00::2 on enp1s0 (52:54:00:12:34:56): ok",
		"nameserver 10.0.2.3: ok",
		"search domain example.com: ok",
		"hostname w16r-guest: ok",
		"share mounted at /mnt/share: ok",
		"share mounted at /mnt/with space: ok",
	}
	if got := messages(rep, phonehome.CheckOK); !slices.Equal(got, wantOK) {
		t.Errorf("passed checks:\n got %q\nwant %q", got, wantOK)
	}
	if got := messages(rep, phonehome.CheckUnknown); len(got) > 0 {
		t.Errorf("checks that could not run: %q", got)
	}
	wantRoutes := []phonehome.Route{
		{Destination: "10.0.2.0/24", Interface: "enp1s0"},
		{Destination: "fd00::/64", Interface: "enp1s0"},
		{Destination: "::/0", Gateway: "fd00::2", Interface: "enp1s0"},
	}
	if !slices.Equal(rep.Routes, wantRoutes) {
		t.Errorf("routes:\n got %+v\nwant %+v", rep.Routes, wantRoutes)
	}
	if !slices.Equal(rep.DNSServers, []string{"10.0.2.3"}) {
		t.Errorf("dns servers = %v", rep.DNSServers)
	}
}

// A guest configured as declared, behind systemd-resolved's stub (as with
// netplan + networkd): the routes come from ip's JSON (a multipath default
// route too) and the nameservers from resolved, so every check passes.
func TestReporterChecksPassBehindResolved(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"/etc/resolv.conf":                 "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n",
		"/run/systemd/resolve/resolv.conf": "nameserver 10.0.2.3\n",
	}
	for k, v := range oneNICFiles {
		files[k] = v
	}
	files["/proc/mounts"] += "tmp /mnt/missing tmpfs rw 0 0\n"
	ip := `case "$*" in
"-j addr show") cat <<'EOF'
` + ipAddrJSON + `
EOF
;;
"-j route show") echo '[{"dst":"default","gateway":"10.0.2.2","dev":"enp1s0","protocol":"static","flags":[]},{"dst":"10.0.2.0/24","dev":"enp1s0","protocol":"kernel","scope":"link","prefsrc":"10.0.2.15","flags":[]}]';;
"-j -6 route show") echo '[{"dst":"fd00::/64","dev":"enp1s0","protocol":"kernel","metric":256,"flags":[]},{"dst":"default","metric":1024,"flags":[],"nexthops":[{"gateway":"fd00::1","dev":"enp1s0"},{"gateway":"fd00::2","dev":"enp1s0"}]},{"type":"unreachable","dst":"2001:db8::/32","dev":"lo","flags":[]}]';;
*) exit 1;; esac
`
	resolvectl := `case "$1" in
dns) printf 'Global:\nLink 2 (enp1s0): 10.0.2.3 192.0.2.53 fd00::3\n';;
domain) printf 'Global:\nLink 2 (enp1s0): example.com ~.\n';;
esac
`
	exp := declaredExpectation()
	exp.NICs = exp.NICs[:1]
	rep := reportFrom(t, guestFixture{files: files, ip: ip, resolvectl: resolvectl}, exp)
	if got := messages(rep, phonehome.CheckMismatch); len(got) > 0 {
		t.Errorf("mismatches on a guest configured as declared: %q", got)
	}
	if got, want := len(messages(rep, phonehome.CheckOK)), 11; got != want {
		t.Errorf("%d checks passed, want %d: %q", got, want, messages(rep, phonehome.CheckOK))
	}
	if !slices.Equal(rep.DNSServers, []string{"10.0.2.3", "192.0.2.53", "fd00::3"}) {
		t.Errorf("dns servers = %v", rep.DNSServers)
	}
	wantRoutes := []phonehome.Route{
		{Destination: "0.0.0.0/0", Gateway: "10.0.2.2", Interface: "enp1s0"},
		{Destination: "10.0.2.0/24", Interface: "enp1s0"},
		{Destination: "fd00::/64", Interface: "enp1s0"},
		{Destination: "::/0", Gateway: "fd00::1", Interface: "enp1s0"},
		{Destination: "::/0", Gateway: "fd00::2", Interface: "enp1s0"},
	}
	if !slices.Equal(rep.Routes, wantRoutes) {
		t.Errorf("routes:\n got %+v\nwant %+v", rep.Routes, wantRoutes)
	}
}

// A guest whose facts cannot be read (ip hangs, no /proc, no resolv.conf)
// and a declaration the reporter cannot make sense of still give a report,
// on time, with the checks saying what they could not tell.
func TestReporterChecksNeverHangOrCrash(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rep := reportFrom(t, guestFixture{files: map[string]string{"/etc/hostname": "x\n"}, ip: "sleep 30\n", resolvectl: "sleep 30\n"},
		map[string]any{"hostname": "w16r-guest", "nics": []any{"not a nic"}},
		"KOHAKU_REPORT_FACT_TIMEOUT=1")
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the reporter took %s with a hanging ip", d)
	}
	if got := messages(rep, phonehome.CheckUnknown); len(got) != 1 || !strings.HasPrefix(got[0], "could not check declared configuration") {
		t.Errorf("checks that could not run = %q", got)
	}
	// Missing facts read as nothing, not as a crash.
	rep = reportFrom(t, guestFixture{files: map[string]string{"/etc/hostname": "x\n"}, ip: "sleep 30\n"},
		Expectation{NICs: []ExpectedNIC{{MAC: "52:54:00:12:34:56", Gateway4: "10.0.2.2"}}, Nameservers: []string{"10.0.2.3"}},
		"KOHAKU_REPORT_FACT_TIMEOUT=1")
	want := []string{"no interface with MAC 52:54:00:12:34:56; found: none", "no nameserver 10.0.2.3; found: none (/etc/resolv.conf)"}
	if got := messages(rep, phonehome.CheckMismatch); !slices.Equal(got, want) {
		t.Errorf("mismatches:\n got %q\nwant %q", got, want)
	}
}

// On this machine's real kernel: the /proc fallback (no iproute2) finds
// the same default routes as ip, and a declaration of the machine's own
// default gateway on its own MAC passes either way.
func TestReporterChecksOnThisMachine(t *testing.T) {
	t.Parallel()
	ipPath := requireTool(t, "ip")
	out, err := exec.Command(ipPath, "-j", "route", "show", "default").Output()
	if err != nil {
		t.Fatalf("ip route: %v", err)
	}
	var defaults []struct{ Gateway, Dev string }
	if err := json.Unmarshal(out, &defaults); err != nil || len(defaults) == 0 || defaults[0].Gateway == "" {
		t.Skipf("this machine has no IPv4 default route via a gateway to compare (%s)", out)
	}
	mac, err := os.ReadFile("/sys/class/net/" + defaults[0].Dev + "/address")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	exp := Expectation{NICs: []ExpectedNIC{{MAC: strings.TrimSpace(string(mac)), Gateway4: defaults[0].Gateway}}}
	withIP := reportFrom(t, guestFixture{ip: "exec " + ipPath + ` "$@"` + "\n"}, exp)
	withoutIP := reportFrom(t, guestFixture{}, exp)
	for name, rep := range map[string]*phonehome.Report{"with ip": withIP, "from /proc": withoutIP} {
		if got := messages(rep, phonehome.CheckOK); len(got) != 1 || !strings.HasPrefix(got[0], "IPv4 default route via "+defaults[0].Gateway) {
			t.Errorf("%s: passed checks = %q, mismatches = %q (hostname %s)", name, got, messages(rep, phonehome.CheckMismatch), host)
		}
	}
	def := func(rs []phonehome.Route) (out []phonehome.Route) {
		for _, r := range rs {
			if r.Default() {
				out = append(out, r)
			}
		}
		return out
	}
	if a, b := def(withIP.Routes), def(withoutIP.Routes); !slices.Equal(a, b) || len(a) == 0 {
		t.Errorf("default routes differ: ip %+v, /proc %+v", a, b)
	}
}

// The reporter is given what the seed declares: per NIC its MAC (derived
// when not given), set_name, addresses, DHCP and gateways; the nameservers
// and search domains of every NIC once; the hostname (the FQDN's first label
// without one); the shares' mount points; the NVIDIA driver it installs. A
// raw network_config declares no NICs to check.
func TestReporterIsGivenTheDeclaration(t *testing.T) {
	t.Parallel()
	spec := &Spec{
		Name: "w16r-decl", FQDN: "gpu-1.example.com", ReportChannel: true,
		Mounts: []Mount{{Type: Mount9P, Tag: "data", Path: "/data"}},
		Network: []NIC{
			{SetName: "lan0", Addresses: []string{"10.0.2.15/24", "2001:db8::5/64"}, Gateway4: "10.0.2.2", Gateway6: "2001:db8::1", Nameservers: []string{"10.0.2.3"}, SearchDomains: []string{"example.com"}},
			{MAC: "52:54:00:AB:CD:EF", DHCP4: true, DHCP6: true, Nameservers: []string{"10.0.2.3", "2001:db8::53"}},
		},
	}
	pl, err := prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(expectation(pl))
	want := `{"hostname":"w16r-decl","nics":[{"mac":"` + pl.nics[0].mac + `","name":"lan0","addresses":["10.0.2.15/24","2001:db8::5/64"],"gateway4":"10.0.2.2","gateway6":"2001:db8::1"},` +
		`{"mac":"52:54:00:ab:cd:ef","dhcp4":true,"dhcp6":true}],"nameservers":["10.0.2.3","2001:db8::53"],"search":["example.com"],"mounts":["/data"]}`
	if string(got) != want {
		t.Errorf("expectation\n got %s\nwant %s", got, want)
	}
	spec.Name, spec.Network, spec.NetworkConfig = "w16r_raw", nil, []byte("version: 2\nethernets: {}\n")
	if pl, err = prepare(spec); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(expectation(pl)); string(got) != `{"hostname":"gpu-1","mounts":["/data"]}` {
		t.Errorf("with a raw network_config: %s", got)
	}
	// and the NVIDIA driver it installs
	spec.NVIDIA = &NVIDIA{Version: "550.54.15"}
	if pl, err = prepare(spec); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(expectation(pl)); string(got) != `{"hostname":"gpu-1","mounts":["/data"],"nvidia_driver":"550.54.15"}` {
		t.Errorf("with nvidia_driver: %s", got)
	}
}

// The driver a seed installs is checked against what nvidia-smi reports:
// runcmd goes on past a failed install, so the check is where a missing or
// wrong driver shows (degraded, or a failed create with
// on_config_mismatch = "fail").
func TestReporterChecksNVIDIADriver(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	smi := filepath.Join(bin, "nvidia-smi")
	path := "PATH=" + bin + ":" + os.Getenv("PATH")
	exp := Expectation{NVIDIADriver: "550.54.15"}
	if got := messages(reportFrom(t, guestFixture{}, exp, path), phonehome.CheckMismatch); !slices.Equal(got, []string{"no NVIDIA driver 550.54.15; found: no GPU answered nvidia-smi"}) {
		t.Errorf("without nvidia-smi: mismatches %q", got)
	}
	if err := os.WriteFile(smi, []byte("#!/bin/sh\necho 'NVIDIA H100 NVL, 550.54.15, 95830'\necho 'NVIDIA H100 NVL, 550.54.15, 95830'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rep := reportFrom(t, guestFixture{}, exp, path)
	if got := messages(rep, phonehome.CheckOK); !slices.Equal(got, []string{"NVIDIA driver 550.54.15: ok"}) {
		t.Errorf("with the driver: ok checks %q", got)
	}
	if len(rep.GPUs) != 2 || rep.GPUs[0].DriverVersion != "550.54.15" {
		t.Errorf("gpus = %+v", rep.GPUs)
	}
	exp.NVIDIADriver = "535.183.01"
	if got := messages(reportFrom(t, guestFixture{}, exp, path), phonehome.CheckMismatch); !slices.Equal(got, []string{"no NVIDIA driver 535.183.01; found: 550.54.15"}) {
		t.Errorf("another driver: mismatches %q", got)
	}
	// A seed without nvidia_driver checks nothing of the GPUs.
	if got := reportFrom(t, guestFixture{}, Expectation{}, path).Checks; len(got) != 0 {
		t.Errorf("checks without a declared driver: %+v", got)
	}
}
