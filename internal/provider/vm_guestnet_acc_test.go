package provider

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"golang.org/x/crypto/ssh"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// Real guests of both generations the test host builds are configured as
// declared, proven from inside the guest: a MIME multipart user data
// (cloud-config + shell script, gzip + base64 as the cloudinit_config data
// source renders it) carries a text/x-shellscript part that writes what the
// guest has (ip -j addr/route, resolv.conf, resolvectl, hostname, the user,
// its keys, the write_files files, the mounts; the second account of `users`
// with its groups, key, sudo rule and password hash, given write-only on
// NoCloud; the time zone; sshd's PasswordAuthentication from ssh_pwauth)
// into the 9p share, and the test reads it on the host. Each guest reaches
// ready over the report channel (the default wait) or, on ConfigDrive,
// through the guest agent. Two boots per generation, one after the other:
// NoCloud with two NICs (static IPv4 + IPv6 with both gateways, DNS and a
// search domain, a renamed interface; DHCP on the second on Debian 13, a
// static address without a gateway on Debian 12, see below) and ConfigDrive
// with one static NIC.
//
// What it expects of the seed package: the shares are mounted before
// cloud-init's scripts-user runs the script (from bootcmd), and the
// declared default routes exist on every renderer, including cloud-init
// 22.4's ENI renderer without net-tools (Debian 12's image has none).

func TestAccGuestNetwork_debian12(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	// ifupdown applies a declared gateway with `ip route add default`, which
	// fails ("File exists") when another NIC's DHCP lease installed a
	// default route first, and then skips the rest of that NIC's stanza.
	// That is documented (kohaku_seed's network section); the second NIC
	// here is static without a gateway instead.
	testGuestNetwork(t, acctest.NewVMEnv(t), "g12", guestSecondStaticNIC)
}

func TestAccGuestNetwork_debian13(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	testGuestNetwork(t, newGen2VMEnv(t), "g13", guestDHCPNIC)
}

// newGen2VMEnv is the test host with the Debian 13 image (cloud-init 25.x,
// netplan + systemd-networkd + systemd-resolved) in place of Debian 12's.
func newGen2VMEnv(t *testing.T) acctest.VMEnv {
	t.Helper()
	env := acctest.NewVMEnv(t)
	env.ImagePool = acctest.Env(t, "KOHAKU_TEST_GEN2_IMAGE_POOL")
	env.Base = acctest.Env(t, "KOHAKU_TEST_GEN2_BASE_VOLUME")
	env.Kernel = acctest.Env(t, "KOHAKU_TEST_GEN2_KERNEL")
	env.Initrd = acctest.Env(t, "KOHAKU_TEST_GEN2_INITRD")
	return env
}

// guestNIC is one declared NIC, as the test checks it in the guest.
type guestNIC struct {
	MAC, Name   string         // Name: set_name, or "" when not renamed
	Addrs       []netip.Prefix // static addresses
	DHCP4       bool
	GW4, GW6    netip.Addr
	Nameservers []netip.Addr
	Search      []string
}

func (n guestNIC) hcl() string {
	var b strings.Builder
	fmt.Fprintf(&b, "    {\n      mac = %q\n", n.MAC)
	if n.Name != "" {
		fmt.Fprintf(&b, "      set_name = %q\n", n.Name)
	}
	if n.DHCP4 {
		b.WriteString("      dhcp4 = true\n")
	}
	if len(n.Addrs) > 0 {
		fmt.Fprintf(&b, "      addresses = %s\n", hclList(n.Addrs))
	}
	if n.GW4.IsValid() {
		fmt.Fprintf(&b, "      gateway4 = %q\n", n.GW4)
	}
	if n.GW6.IsValid() {
		fmt.Fprintf(&b, "      gateway6 = %q\n", n.GW6)
	}
	if len(n.Nameservers) > 0 {
		fmt.Fprintf(&b, "      nameservers = %s\n", hclList(n.Nameservers))
	}
	if len(n.Search) > 0 {
		fmt.Fprintf(&b, "      search_domains = %s\n", hclList(n.Search))
	}
	b.WriteString("    },\n")
	return b.String()
}

func hclList[T any](xs []T) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", fmt.Sprint(x))
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// The guest under user-mode networking: 10.0.2.0/24 and fec0::/64, the host
// (and gateway) 10.0.2.2 / fec0::2, slirp's DNS 10.0.2.3. Slirp's DHCP would
// hand out 10.0.2.15, so 10.0.2.50 proves the static address; 192.0.2.53
// is a name server only the seed names (slirp's DHCP offers 10.0.2.3).
var (
	guestStaticNIC = guestNIC{
		MAC:         "52:54:00:16:0a:01",
		Name:        "lan0",
		Addrs:       []netip.Prefix{netip.MustParsePrefix("10.0.2.50/24"), netip.MustParsePrefix("fec0::50/64")},
		GW4:         netip.MustParseAddr("10.0.2.2"),
		GW6:         netip.MustParseAddr("fec0::2"),
		Nameservers: []netip.Addr{netip.MustParseAddr("10.0.2.3"), netip.MustParseAddr("192.0.2.53")},
		Search:      []string{"w16g.example"},
	}
	guestDHCPNIC         = guestNIC{MAC: "52:54:00:16:0a:02", DHCP4: true}
	guestSecondStaticNIC = guestNIC{MAC: "52:54:00:16:0a:02", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.2.60/24")}}
)

const (
	guestHostname = "w16g-guest"
	guestShare    = "/shared"
)

// guestEvidenceScript is the shell-script part: it runs in scripts-user
// (before runcmd) and writes what the guest has into the share.
const guestEvidenceScript = `#!/bin/sh
d=` + guestShare + `
ip -j addr > $d/addr.json
ip -j route > $d/route4.json
ip -6 -j route > $d/route6.json
cat /etc/resolv.conf > $d/resolv.conf
if command -v resolvectl > /dev/null; then resolvectl status > $d/resolvectl.txt 2>&1; fi
hostname > $d/hostname
getent passwd kohaku > $d/passwd
cat /home/kohaku/.ssh/authorized_keys > $d/authorized_keys
cat /etc/kohaku-w16g /etc/kohaku-w16g-mime > $d/write_files
grep " $d " /proc/mounts > $d/mounts
cat /etc/network/interfaces.d/* /etc/netplan/*.yaml /run/systemd/network/* > $d/rendered-network 2>&1
getent passwd alice > $d/passwd-alice
getent shadow alice | cut -d: -f2 > $d/shadow-alice
id -nG alice > $d/groups-alice
cat /home/alice/.ssh/authorized_keys > $d/authorized_keys-alice
grep -h '^alice ' /etc/sudoers.d/* > $d/sudoers-alice
cat /etc/timezone > $d/localtime
date +%Z >> $d/localtime
grep -rhi '^PasswordAuthentication' /etc/ssh/sshd_config /etc/ssh/sshd_config.d > $d/sshd-pwauth
sync
`

// guestUserData is a MIME multipart document as hashicorp/cloudinit's
// cloudinit_config renders it by default (gzip, then base64): a
// cloud-config part with a write_files entry of its own, and the script.
func guestUserData(t *testing.T) string {
	t.Helper()
	const boundary = "MIMEBOUNDARY-w16g"
	part := func(ctype, name, body string) string {
		return "--" + boundary + "\r\nContent-Transfer-Encoding: 7bit\r\nContent-Type: " + ctype +
			"\r\nMime-Version: 1.0\r\nContent-Disposition: attachment; filename=\"" + name + "\"\r\n\r\n" + body + "\r\n"
	}
	doc := "Content-Type: multipart/mixed; boundary=\"" + boundary + "\"\r\nMIME-Version: 1.0\r\n\r\n" +
		part("text/cloud-config", "files.cfg", "#cloud-config\nwrite_files:\n  - path: /etc/kohaku-w16g-mime\n    content: \"written by the MIME cloud-config part\\n\"\n") +
		part("text/x-shellscript", "evidence.sh", guestEvidenceScript) +
		"--" + boundary + "--\r\n"
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	if _, err := w.Write([]byte(doc)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(z.Bytes())
}

// guestKey is a fresh OpenSSH public key for the login user.
func guestKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " w16g@kohaku"
}

func guestNetConfig(env acctest.VMEnv, prefix, format, waitFor, share, key, aliceKey, userData string, nics []guestNIC) string {
	var nets, ifaces strings.Builder
	for _, n := range nics {
		nets.WriteString(n.hcl())
		ifaces.WriteString("    { type = \"user\" },\n")
	}
	return fmt.Sprintf(`
provider "kohaku" {
  uri = %[1]q
}

resource "kohaku_seed" "test" {
  name     = "%[2]sseed.iso"
  pool     = %[3]q
  format   = %[4]q
  hostname = %[5]q

  user = {
    name                = "kohaku"
    ssh_authorized_keys = [%[6]q]
  }
  users = [{
    name                = "alice"
    groups              = ["adm"]
    sudo                = "ALL=(ALL) ALL"
    ssh_authorized_keys = [%[16]q]
    %[17]s = %[18]q
  }]
  timezone   = %[19]q
  ssh_pwauth = false
  network = [
%[7]s  ]
  shared_folders   = [{ tag = "kohaku_shared", path = %[8]q }]
  write_files      = [{ path = "/etc/kohaku-w16g", content = "written by write_files\n" }]
  user_data_base64 = %[9]q
}

resource "kohaku_vm" "test" {
  name       = "%[2]svm"
  type       = "qemu"
  vcpu       = 1
  cpu_mode   = "custom"
  memory_mib = 1024
  kernel     = %[10]q
  initrd     = %[11]q
  cmdline    = "root=/dev/vda rw console=ttyS0 panic=5"
  seed_id    = kohaku_seed.test.id

  disk = {
    base_pool   = %[12]q
    base_volume = %[13]q
    pool        = %[3]q
  }
  network_interface = [
%[14]s  ]
  shared_folder    = [{ source = %[15]q, tag = "kohaku_shared" }]
  shutdown_timeout = "2s"
  wait_for         = %[20]q
  timeouts {
    create = "30m"
  }
}
`, env.URI, prefix, env.Pool, format, guestHostname, key, nets.String(), guestShare, userData,
		env.Kernel, env.Initrd, env.ImagePool, env.Base, ifaces.String(), share,
		aliceKey, guestPasswordAttr(format), guestPasswordHash, guestTimezone, waitFor)
}

// The second account, alice: the NoCloud boot gives her password hash
// write-only, the ConfigDrive boot as a stored attribute.
const (
	guestPasswordHash = "$6$rounds=4096$w16gsalt$6D3ZBr5n9iPj1X0g1yBc0m9kWfZ3a2yq8oQp1rT4uV7wX0yZ2aB4cD6eF8gH0iJ2kL4mN6oP8qR0sT2uV4wX6."
	guestTimezone     = "Asia/Tokyo"
)

func guestPasswordAttr(format string) string {
	if format == "nocloud" {
		return "password_hash_wo"
	}
	return "password_hash"
}

func testGuestNetwork(t *testing.T, env acctest.VMEnv, short string, second guestNIC) {
	// The NoCloud boot waits for the report over the channel (the default);
	// the ConfigDrive boot asks the QEMU guest agent instead (wait_for =
	// "guest_agent": cloud-init's result.json and the reporter's report
	// read through libvirt), so that way to ready is proven on both
	// generations too, at no extra boot.
	boots := []struct {
		format, waitFor string
		nics            []guestNIC
	}{
		{"nocloud", "channel", []guestNIC{guestStaticNIC, second}},
		{"configdrive", "guest_agent", []guestNIC{guestStaticNIC}},
	}
	for _, b := range boots {
		t.Run(b.format, func(t *testing.T) {
			prefix := vmTestPrefix(t, env, short+b.format[:2])
			share := t.TempDir()
			key, aliceKey := guestKey(t), guestKey(t)
			addr := "kohaku_vm.test"
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
				Steps: []resource.TestStep{{
					Config: guestNetConfig(env, prefix, b.format, b.waitFor, share, key, aliceKey, guestUserData(t), b.nics),
					ConfigStateChecks: []statecheck.StateCheck{
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("ready_via"), knownvalue.StringExact(b.waitFor)),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("cloud_init_status"), knownvalue.StringExact("done")),
						statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("hostname"), knownvalue.StringExact(guestHostname)),
						// A write-only password hash keeps even the user data's digest out of state.
						statecheck.ExpectKnownValue("kohaku_seed.test", tfjsonpath.New("user_data_sha256"), userDataDigestCheck(b.format == "nocloud")),
					},
					Check: func(*terraform.State) error {
						err := checkGuestEvidence(share, key, aliceKey, b.nics)
						if err != nil {
							logGuestEvidence(t, share)
						}
						return err
					},
				}},
			})
		})
	}
}

// readEvidence reads a file the guest's script wrote into the share.
func readEvidence(share, file string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(share, file))
	if err != nil {
		return nil, fmt.Errorf("the guest's shell-script part did not write %s into the 9p share (was %s mounted before scripts-user ran?): %v", file, guestShare, err)
	}
	return b, nil
}

func logGuestEvidence(t *testing.T, share string) {
	for _, f := range []string{"addr.json", "route4.json", "route6.json", "resolv.conf", "resolvectl.txt", "rendered-network"} {
		if b, err := os.ReadFile(filepath.Join(share, f)); err == nil {
			t.Logf("guest's %s:\n%s", f, b)
		}
	}
}

type ipLink struct {
	IfName   string `json:"ifname"`
	Address  string `json:"address"`
	AddrInfo []struct {
		Family    string `json:"family"`
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
	} `json:"addr_info"`
}

type ipHop struct {
	Gateway string `json:"gateway"`
	Dev     string `json:"dev"`
}

type ipRoute struct {
	Dst string `json:"dst"`
	ipHop
	Nexthops []ipHop `json:"nexthops"`
}

// hasDefaultRoute: a default route (or a nexthop of one) via gw on dev.
func hasDefaultRoute(routes []ipRoute, gw netip.Addr, dev string) bool {
	for _, r := range routes {
		if r.Dst != "default" {
			continue
		}
		for _, h := range append([]ipHop{r.ipHop}, r.Nexthops...) {
			if g, err := netip.ParseAddr(h.Gateway); err == nil && g == gw && h.Dev == dev {
				return true
			}
		}
	}
	return false
}

// dnsInUse: the name servers and search domains the guest resolves with,
// from resolv.conf and, where systemd-resolved runs (resolv.conf then names
// its stub 127.0.0.53), from resolvectl status.
func dnsInUse(resolvConf, resolvectl []byte) (servers, search []string) {
	for _, line := range strings.Split(string(resolvConf), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "nameserver":
			servers = append(servers, f[1])
		case len(f) >= 2 && (f[0] == "search" || f[0] == "domain"):
			search = append(search, f[1:]...)
		}
	}
	for _, line := range strings.Split(string(resolvectl), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "DNS Servers", "Current DNS Server":
			servers = append(servers, strings.Fields(v)...)
		case "DNS Domain":
			search = append(search, strings.Fields(v)...)
		}
	}
	return servers, search
}

// checkGuestEvidence compares what the guest wrote into the share with what
// the seed declared; it reports every mismatch, not only the first.
func checkGuestEvidence(share, key, aliceKey string, nics []guestNIC) error {
	var errs []string
	fail := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	read := func(file string) []byte {
		b, err := readEvidence(share, file)
		if err != nil {
			fail("%v", err)
		}
		return b
	}
	var links []ipLink
	var routes4, routes6 []ipRoute
	for file, v := range map[string]any{"addr.json": &links, "route4.json": &routes4, "route6.json": &routes6} {
		if b := read(file); b != nil {
			if err := json.Unmarshal(b, v); err != nil {
				fail("%s from the guest is not ip -j output: %v: %q", file, err, b)
			}
		}
	}
	for i, n := range nics {
		at := slices.IndexFunc(links, func(l ipLink) bool { return strings.EqualFold(l.Address, n.MAC) })
		if at < 0 {
			if links != nil {
				fail("network[%d]: no interface with MAC %s in the guest", i, n.MAC)
			}
			continue
		}
		l := links[at]
		if n.Name != "" && l.IfName != n.Name {
			fail("network[%d]: the interface with MAC %s is %s, want it renamed to %s (set_name)", i, n.MAC, l.IfName, n.Name)
		}
		var has []netip.Prefix
		for _, a := range l.AddrInfo {
			if p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", a.Local, a.PrefixLen)); err == nil {
				has = append(has, p)
			}
		}
		for _, want := range n.Addrs {
			if !slices.Contains(has, want) {
				fail("network[%d]: %s (MAC %s) lacks %s; it has %v", i, l.IfName, n.MAC, want, has)
			}
		}
		if n.DHCP4 && !slices.ContainsFunc(has, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
			fail("network[%d]: %s (MAC %s) got no IPv4 address by DHCP; it has %v", i, l.IfName, n.MAC, has)
		}
		if n.GW4.IsValid() && routes4 != nil && !hasDefaultRoute(routes4, n.GW4, l.IfName) {
			fail("network[%d]: no IPv4 default route via %s on %s; the guest's IPv4 routes: %+v", i, n.GW4, l.IfName, routes4)
		}
		if n.GW6.IsValid() && routes6 != nil && !hasDefaultRoute(routes6, n.GW6, l.IfName) {
			fail("network[%d]: no IPv6 default route via %s on %s; the guest's IPv6 routes: %+v", i, n.GW6, l.IfName, routes6)
		}
	}
	if rc := read("resolv.conf"); rc != nil {
		rctl, _ := os.ReadFile(filepath.Join(share, "resolvectl.txt"))
		servers, search := dnsInUse(rc, rctl)
		for i, n := range nics {
			for _, ns := range n.Nameservers {
				if !slices.Contains(servers, ns.String()) {
					fail("network[%d]: name server %s is not in use (resolv.conf and resolvectl name %v)", i, ns, servers)
				}
			}
			for _, s := range n.Search {
				if !slices.Contains(search, s) {
					fail("network[%d]: search domain %s is not in use (resolv.conf and resolvectl name %v)", i, s, search)
				}
			}
		}
	}
	for _, c := range []struct {
		file string
		want *regexp.Regexp
	}{
		{"hostname", regexp.MustCompile(`^` + guestHostname + `\n$`)},
		{"passwd", regexp.MustCompile(`^kohaku:x:\d+:\d+::/home/kohaku:/bin/bash\n$`)},
		{"authorized_keys", regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `$`)},
		{"write_files", regexp.MustCompile(`^written by write_files\nwritten by the MIME cloud-config part\n$`)},
		{"mounts", regexp.MustCompile(`^kohaku_shared ` + guestShare + ` 9p .*trans=virtio`)},
		// users: the second account with its shell, groups, key, sudo rule
		// and password hash; the time zone; password logins refused.
		{"passwd-alice", regexp.MustCompile(`^alice:x:\d+:\d+::/home/alice:/bin/bash\n$`)},
		{"shadow-alice", regexp.MustCompile(`^` + regexp.QuoteMeta(guestPasswordHash) + `\n$`)},
		{"groups-alice", regexp.MustCompile(`^alice( \S+)* adm( \S+)*\n$|^alice adm\n$`)},
		{"authorized_keys-alice", regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(aliceKey) + `$`)},
		{"sudoers-alice", regexp.MustCompile(`^alice ALL=\(ALL\) ALL\n$`)},
		{"localtime", regexp.MustCompile(`^` + guestTimezone + `\nJST\n$`)},
		{"sshd-pwauth", regexp.MustCompile(`(?i)^PasswordAuthentication no\n`)},
	} {
		if b := read(c.file); b != nil && !c.want.Match(b) {
			fail("%s from the guest is %q, want it to match %s", c.file, b, c.want)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("the guest is not what the seed declared:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// userDataDigestCheck expects no user_data_sha256 when the seed's user data
// holds write-only values, and a SHA-256 otherwise.
func userDataDigestCheck(writeOnly bool) knownvalue.Check {
	if writeOnly {
		return knownvalue.Null()
	}
	return knownvalue.StringRegexp(regexp.MustCompile(`^[0-9a-f]{64}$`))
}
