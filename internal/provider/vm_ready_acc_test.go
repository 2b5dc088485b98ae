package provider

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// The end-to-end tests boot the real Debian 12 cloud-init guest under TCG:
// each takes one to four minutes, depending on the machine's load.

const readyTestKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ1c2VkZm9ydGVzdGluZ29ubHkwMDAwMDAwMDAwMDAw e2e@kohaku"

// readyConfig is a provider listening for phone-home calls, and a seed and
// a VM booting the test guest (readyResources).
func readyConfig(env acctest.VMEnv, prefix string, port int, share, seedExtra, vmExtra string) string {
	return fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  phone_home = {
    listen_address = "127.0.0.1:%d"
    base_url       = "http://10.0.2.2:%d"
  }
}
`, env.URI, port, port) + readyResources(env, prefix, share, "test", "", seedExtra, vmExtra)
}

// readyResources is a seed and a VM booting the test guest, named res, on
// the given provider (empty: the default one). The guest reports what it
// became through the 9p share: the user's runcmd runs after Kohaku's, so
// the share is mounted by then.
//
// The test guests have one vCPU: under TCG on two cores, with two guests
// booting at once, a second vCPU made each boot half as long again
// (151 s against 100 s for the two declared-config tests side by side).
// They boot with panic=5: under TCG an SMP guest kernel (one with two
// vCPUs, as one of TestAccReady_channel's has) now and then oopses on an int3 in
// code it is patching (in a Debian 13 boot: "Oops: int3" in kfree, then
// "Kernel panic - not syncing"), an emulation artefact, and then
// hangs until the create timeout (30 minutes in the guest network test).
// With panic=5 it reboots and cloud-init finishes in the second boot.
//
// And they have QEMU's qemu64 CPU (cpu_mode "custom"), not the default for
// type qemu (maximum, with AVX2 and XSAVE): under TCG a Debian 12 guest
// alone on the test host was ready after 111 s with qemu64 and 141-151 s
// with maximum (three runs; blacklisting the CPU-feature crypto modules or
// 5-level paging did not help, so the cost is in emulating the newer
// instructions). The default is proven by the firmware test's UEFI guest.
func readyResources(env acctest.VMEnv, prefix, share, res, provider, seedExtra, vmExtra string) string {
	if provider != "" {
		provider = "  provider = " + provider + "\n"
	}
	return fmt.Sprintf(`
resource "kohaku_seed" %[1]q {
%[2]s  name     = "%[3]sseed.iso"
  pool     = %[4]q
  hostname = "e2e-guest"

  user = {
    name                = "kohaku"
    ssh_authorized_keys = [%[5]q]
  }
  network = [{
    addresses   = ["10.0.2.15/24"]
    gateway4    = "10.0.2.2"
    nameservers = ["10.0.2.3"]
  }]
  shared_folders = [{ tag = "kohaku_shared", path = "/shared" }]
  write_files = [
    { path = "/etc/kohaku-e2e", content = "written by write_files\n" },
    { path = "/usr/local/bin/nvidia-smi", permissions = "0755", content = %[13]q },
  ]
  user_data = <<-EOT
    #cloud-config
    runcmd:
      - hostname > /shared/hostname
      - ip -4 -o addr show > /shared/addresses
      - cat /etc/kohaku-e2e > /shared/write_files
      - getent passwd kohaku > /shared/user
      - cat /home/kohaku/.ssh/authorized_keys > /shared/authorized_keys
      - grep ' /shared ' /proc/mounts > /shared/mounts
      - cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub > /shared/hostkey
      - sync
  EOT
%[6]s
}

resource "kohaku_vm" %[1]q {
%[2]s  name       = "%[3]svm"
  type       = "qemu"
  vcpu       = 1
  cpu_mode   = "custom"
  memory_mib = 1024
  kernel     = %[7]q
  initrd     = %[8]q
  cmdline    = "root=/dev/vda rw console=ttyS0 panic=5"
  seed_id    = kohaku_seed.%[1]s.id

  disk = {
    base_pool   = %[9]q
    base_volume = %[10]q
    pool        = %[4]q
  }
  network_interface = [{ type = "user" }]
  shared_folder     = [{ source = %[11]q, tag = "kohaku_shared" }]
  shutdown_timeout  = "2s"
%[12]s
}
`, res, provider, prefix, env.Pool, readyTestKey, seedExtra, env.Kernel, env.Initrd, env.ImagePool, env.Base, share, vmExtra, standInNvidiaSMI)
}

// standInNvidiaSMI answers the two queries Kohaku's reporter makes of
// nvidia-smi (the first-boot report's GPU list and the heartbeat's load) as
// a driver with one GPU would, so the real guests prove both parsers. A
// value the card cannot give is "[N/A]", as nvidia-smi writes it.
const standInNvidiaSMI = `#!/bin/sh
case "$*" in
*utilization.gpu*) echo "0, Kohaku Stand-in H100, 550.54.14, 37, 1024, 81559, 41, [N/A]" ;;
*) echo "Kohaku Stand-in H100, 550.54.14, 81559" ;;
esac
`

// checkShared compares a file the guest wrote into the share.
func checkShared(share, file string, want *regexp.Regexp) resource.TestCheckFunc {
	return func(*terraform.State) error {
		b, err := os.ReadFile(filepath.Join(share, file))
		if err != nil {
			return fmt.Errorf("the guest did not write %s through the 9p share: %v", file, err)
		}
		if !want.Match(b) {
			return fmt.Errorf("%s from the guest is %q, want it to match %s", file, b, want)
		}
		return nil
	}
}

// Apply returns only once the real guest's first-boot report arrived, and
// the guest is what the seed said: hostname, user and key, the static
// address on the MAC-matched NIC, the write_files file and the 9p mount.
//
// The same guest proves the NVIDIA install path: its seed
// has nvidia_driver with a url_template on the stand-in site on loopback
// (nvidia_standin_acc_test.go). The guest installs the build tools and headers
// from the stand-in mirror, downloads exactly that version's installer and
// runs it with the arguments the seed documents; the installer records how
// it ran in the share and installs nvidia-smi, whose GPU arrives parsed in
// guest.gpus. (This seed has no write_files nvidia-smi: the GPU can only
// come from the installer.)
//
// The version comes from where a user's does: kohaku_gpu_binding reads it
// from the nested host's NVIDIA stand-in module (/sys/module/nvidia/version
// over qemu+ssh, before it moves the GPU stand-in off the nvidia driver),
// and the seed takes kohaku_gpu_binding.gpu.nvidia_driver_version. Destroy
// gives the GPU back to nvidia.
func TestAccReady_phoneHome(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	h := nestedhost.RequireSSH(t)
	if h.NVIDIAVersion != nvidiaStandInVersion {
		t.Fatalf("the nested host's NVIDIA stand-in declares %s, the stand-in site serves %s: make them agree", h.NVIDIAVersion, nvidiaStandInVersion)
	}
	prefix := vmTestPrefix(t, env, "ph")
	share := t.TempDir()
	port := acctest.ClosedPort(t)
	addr := "kohaku_vm.test"
	var burst *faultBurst
	nv := startNVIDIAStandIn(t, env.Kernel)
	cfg := readyConfig(env, prefix, port, share, fmt.Sprintf(`  phone_home = true
  nvidia_driver = {
    version      = kohaku_gpu_binding.gpu.nvidia_driver_version
    url_template = "http://10.0.2.2:%d/{version}/NVIDIA-Linux-x86_64-{version}.run"
    sha256       = %q
  }`, nv.Port, fmt.Sprintf("%x", sha256.Sum256([]byte(nvidiaStandInInstaller(nvidiaStandInVersion))))), "  wait_for = \"phone_home\"\n  on_config_mismatch = \"fail\"\n  timeouts {\n    create = \"25m\"\n  }") + fmt.Sprintf(`
resource "kohaku_gpu_binding" "gpu" {
  host    = "l1"
  address = %q
}
`, h.GPU)
	// The nested host is a host of the provider's hosts map, reached over ssh.
	hostsMap := fmt.Sprintf("  hosts = {\n    l1 = { uri = %q }\n  }\n  phone_home = {", h.SSHURI)
	if !strings.Contains(cfg, "  phone_home = {") {
		t.Fatalf("readyConfig changed: no phone_home block in\n%s", cfg)
	}
	cfg = strings.Replace(cfg, "  phone_home = {", hostsMap, 1)
	binding := "kohaku_gpu_binding.gpu"
	for _, r := range []struct{ old, new string }{
		{fmt.Sprintf("    { path = \"/usr/local/bin/nvidia-smi\", permissions = \"0755\", content = %q },\n", standInNvidiaSMI), ""},
		{"    #cloud-config\n", "    #cloud-config\n    " + nvidiaStandInAptUserData(nv.Port)},
	} {
		if !strings.Contains(cfg, r.old) {
			t.Fatalf("readyResources changed: no %q in\n%s", r.old, cfg)
		}
		cfg = strings.Replace(cfg, r.old, r.new, 1)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             resource.ComposeAggregateTestCheckFunc(acctest.CheckNothingLeft(env, prefix), expectDrivers(h, onHost(h))),
		Steps: []resource.TestStep{{
			// While the real guest boots, the listener takes a burst of
			// wrong-token, oversized, slow and malformed requests.
			PreConfig: func() {
				if err := expectDrivers(h, onHost(h))(nil); err != nil {
					t.Fatalf("the nested host's GPU stand-in is not on its host drivers: %v", err)
				}
				burst = startFaultBurst(t, port)
			},
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(binding, tfjsonpath.New("nvidia_driver_version"), knownvalue.StringExact(h.NVIDIAVersion)),
				statecheck.ExpectKnownValue(binding, detail(0, "original_driver"), knownvalue.StringExact("nvidia")),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("ready_via"), knownvalue.StringExact("phone_home")),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("gpus"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectExact(map[string]knownvalue.Check{
						"name": knownvalue.StringExact(nvidiaStandInGPU), "driver_version": knownvalue.StringExact(nvidiaStandInVersion), "memory_mib": knownvalue.Int64Exact(nvidiaStandInMiB),
					}),
				})),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("hostname"), knownvalue.StringExact("e2e-guest")),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("cloud_init_status"), knownvalue.StringExact("done")),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("ssh_host_keys").AtMapKey("ssh-ed25519"),
					knownvalue.StringRegexp(regexp.MustCompile(`^ssh-ed25519 AAAA`))),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("remote_address"),
					knownvalue.StringRegexp(regexp.MustCompile(`^127\.0\.0\.1:\d+$`))),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				func(*terraform.State) error { return burst.check(t) },
				expectDrivers(h, onVFIO(h)),
				guestChecks(env, addr, prefix+"vm", share),
				func(*terraform.State) error { return nv.check() },
				// The installer ran from a private file mktemp made (tmp.XXXXXXXXXX),
				// not from a fixed path another user of the guest could plant.
				checkShared(share, nvidiaStandInRecord, regexp.MustCompile(`^name=tmp\.[A-Za-z0-9]{10}\nversion=`+regexp.QuoteMeta(nvidiaStandInVersion)+
					`\nargs=--silent --dkms --no-cc-version-check\nkernel=\S+\nresult=installed /usr/bin/nvidia-smi\n$`)),
			),
		}},
	})
}

// guestChecks: the domain runs and is what its seed said (hostname, user
// and key, the static address on the MAC-matched NIC, the write_files file,
// the 9p mount), and the host key it reported is the one it has.
func guestChecks(env acctest.VMEnv, addr, vm, share string) resource.TestCheckFunc {
	return resource.ComposeAggregateTestCheckFunc(
		acctest.CheckDomState(env, vm, "running"),
		resource.TestCheckTypeSetElemNestedAttrs(addr, "guest.addresses.*", map[string]string{"address": "10.0.2.15/24"}),
		checkShared(share, "hostname", regexp.MustCompile(`^e2e-guest\n$`)),
		checkShared(share, "addresses", regexp.MustCompile(`inet 10\.0\.2\.15/24`)),
		checkShared(share, "write_files", regexp.MustCompile(`^written by write_files\n$`)),
		checkShared(share, "user", regexp.MustCompile(`^kohaku:x:\d+:\d+::/home/kohaku:/bin/bash\n$`)),
		checkShared(share, "authorized_keys", regexp.MustCompile(regexp.QuoteMeta(readyTestKey))),
		checkShared(share, "mounts", regexp.MustCompile(`^kohaku_shared /shared 9p .*trans=virtio`)),
		func(s *terraform.State) error {
			reported := s.RootModule().Resources[addr].Primary.Attributes["guest.ssh_host_keys.ssh-ed25519"]
			has, err := os.ReadFile(filepath.Join(share, "hostkey"))
			if err != nil {
				return fmt.Errorf("the guest did not write its host key to the share: %v", err)
			}
			if reported == "" || strings.TrimSpace(string(has)) != reported {
				return fmt.Errorf("%s: reported host key %q, the guest has %q", addr, reported, strings.TrimSpace(string(has)))
			}
			return nil
		},
	)
}

// The default way to ready: with no phone_home block anywhere (no HTTP
// listener, no network path from the guest to Terraform) three real guests,
// one driven through the unix socket and two through hosts of the hosts
// map, over qemu+ssh and qemu+tls, report over their libvirt channel, and
// apply returns only then. The same guests then prove live health over
// each transport.
func TestAccReady_channel(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	tlsURI := acctest.Env(t, "KOHAKU_TEST_TLS_URI")
	pki := acctest.Env(t, "KOHAKU_TEST_TLS_PKI")
	sshd := acctest.StartSSHD(t)
	sshURI := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port)
	prefix := vmTestPrefix(t, env, "ch")
	wait := "  timeouts {\n    create = \"15m\"\n  }"
	// The ssh and tls connections are hosts of the hosts map, not provider
	// aliases: terraform-plugin-testing serves one in-process provider to
	// every alias, so the last configured alias would win for all of them
	// (in real use each alias is a process of its own). The data sources
	// show which connection the resources of each host get.
	// One guest has two vCPUs, the others one (a second vCPU costs a
	// third of a boot's time under TCG): the heartbeats report each
	// guest's own count.
	type guest struct {
		res, host, uri, prefix, share string
		cpus                          int
	}
	guests := []guest{
		{"unix", "", env.URI, prefix + "u-", t.TempDir(), 2},
		{"ssh", "ssh", sshURI, prefix + "s-", t.TempDir(), 1},
		{"tls", "tls", tlsURI, prefix + "t-", t.TempDir(), 1},
	}
	cfg := fmt.Sprintf(`
provider "kohaku" {
  uri   = %q
  hosts = {
    ssh = {
      uri = %q
      ssh = {
        key_file         = %q
        known_hosts_file = %q
        use_agent        = false
      }
    }
    tls = {
      uri = %q
      tls = { pki_path = %q }
    }
  }
}
`, env.URI, sshURI, sshd.ClientKey, sshd.WriteKnownHosts(t), tlsURI, pki)
	var checks []statecheck.StateCheck
	var guestCheck []resource.TestCheckFunc
	for _, g := range guests {
		host := ""
		if g.host != "" {
			host = fmt.Sprintf("  host = %q", g.host)
			cfg += fmt.Sprintf("\ndata \"kohaku_host\" %q {\n  host = %q\n}\n", g.res, g.host)
			checks = append(checks,
				statecheck.ExpectKnownValue("data.kohaku_host."+g.res, tfjsonpath.New("uri"), knownvalue.StringExact(g.uri)),
				statecheck.ExpectKnownValue("kohaku_vm."+g.res, tfjsonpath.New("host"), knownvalue.StringExact(g.host)),
				statecheck.ExpectKnownValue("kohaku_seed."+g.res, tfjsonpath.New("host"), knownvalue.StringExact(g.host)))
		}
		res := readyResources(env, g.prefix, g.share, g.res, "", host, wait+"\n"+host)
		if g.cpus != 1 {
			if !strings.Contains(res, "  vcpu       = 1\n") {
				t.Fatalf("readyResources changed: no vcpu = 1 in\n%s", res)
			}
			res = strings.Replace(res, "  vcpu       = 1\n", fmt.Sprintf("  vcpu       = %d\n", g.cpus), 1)
		}
		cfg += res
		addr := "kohaku_vm." + g.res
		checks = append(checks,
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("wait_for"), knownvalue.StringExact("auto")),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("ready_via"), knownvalue.StringExact("channel")),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("hostname"), knownvalue.StringExact("e2e-guest")),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("cloud_init_status"), knownvalue.StringExact("done")),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("remote_address"), knownvalue.StringExact("")),
			// The stand-in nvidia-smi's GPU, through the first-boot report.
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("gpus"), knownvalue.ListExact([]knownvalue.Check{
				knownvalue.ObjectExact(map[string]knownvalue.Check{
					"name": knownvalue.StringExact("Kohaku Stand-in H100"), "driver_version": knownvalue.StringExact("550.54.14"), "memory_mib": knownvalue.Int64Exact(81559),
				}),
			})),
			statecheck.ExpectKnownValue("kohaku_seed."+g.res, tfjsonpath.New("report_channel"), knownvalue.Bool(true)),
			statecheck.ExpectKnownValue("kohaku_seed."+g.res, tfjsonpath.New("phone_home_url"), knownvalue.Null()))
		guestCheck = append(guestCheck, guestChecks(env, addr, g.prefix+"vm", g.share))
	}
	// Live health (the same guests, no further boot): the heartbeat through
	// each transport agrees with the domain; then the agent of one guest is
	// stopped, and reading it fails with the diagnostic, or with
	// allow_silent reads as silent.
	healthOf := func(g guest, extra string) string {
		host := ""
		if g.host != "" {
			host = fmt.Sprintf("  host = %q\n", g.host)
		}
		return fmt.Sprintf("\ndata \"kohaku_vm_health\" %q {\n  name = kohaku_vm.%s.name\n%s%s}\n", g.res, g.res, host, extra)
	}
	healthy := cfg
	var healthChecks []statecheck.StateCheck
	var healthAgrees []resource.TestCheckFunc
	for _, g := range guests {
		healthy += healthOf(g, "")
		addr := "data.kohaku_vm_health." + g.res
		healthChecks = append(healthChecks,
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("reporting"), knownvalue.Bool(true)),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("hostname"), knownvalue.StringExact("e2e-guest")),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("cpus"), knownvalue.Int64Exact(int64(g.cpus))),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("interval_seconds"), knownvalue.Int64Exact(10)),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("cloud_init_status"), knownvalue.StringExact("done")),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("load_average"), knownvalue.ListSizeExact(3)),
			statecheck.ExpectKnownValue(addr, tfjsonpath.New("gpus"), knownvalue.ListExact([]knownvalue.Check{
				knownvalue.ObjectExact(map[string]knownvalue.Check{
					"index": knownvalue.Int64Exact(0), "name": knownvalue.StringExact("Kohaku Stand-in H100"),
					"driver_version": knownvalue.StringExact("550.54.14"), "utilization_percent": knownvalue.Float64Exact(37),
					"memory_used_mib": knownvalue.Int64Exact(1024), "memory_total_mib": knownvalue.Int64Exact(81559),
					"temperature_c": knownvalue.Float64Exact(41), "power_watts": knownvalue.Float64Exact(-1),
				}),
			})),
			statecheck.CompareValuePairs(addr, tfjsonpath.New("instance_id"), "kohaku_vm."+g.res, tfjsonpath.New("guest").AtMapKey("instance_id"), compare.ValuesSame()),
		)
		healthAgrees = append(healthAgrees, checkHealthAgrees(t, addr, 1024))
	}
	unix, stopped := guests[0], guests[1]
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config:            cfg,
				ConfigStateChecks: checks,
				Check:             resource.ComposeAggregateTestCheckFunc(guestCheck...),
			},
			{
				// The plan after apply is empty: telemetry is no change.
				Config:            healthy,
				ConfigStateChecks: healthChecks,
				Check:             resource.ComposeAggregateTestCheckFunc(healthAgrees...),
			},
			{
				// A snapshot of the running unix guest (the same boot): its
				// file systems frozen through its agent around the start of
				// libvirt's backup job, as the agent's own log in the
				// guest's journal shows, and thawed after.
				Config: healthy + fmt.Sprintf("\nresource \"kohaku_snapshot\" \"live\" {\n  vm   = kohaku_vm.%s.id\n  name = \"live\"\n}\n", unix.res),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_snapshot.live", tfjsonpath.New("consistency"), knownvalue.StringExact("quiesced")),
				},
				Check: func(*terraform.State) error {
					// qemu-ga syslogs each freeze ("guest-fsfreeze called").
					out, err := acctest.GuestExec(env.URI, unix.prefix+"vm", "/bin/journalctl", "--no-pager")
					if err != nil {
						return fmt.Errorf("reading the guest's journal: %w", err)
					}
					if !strings.Contains(out, "guest-fsfreeze called") {
						return fmt.Errorf("the guest's journal has no freeze by its agent (no \"guest-fsfreeze called\"); its qemu-ga lines:\n%s", grepLines(out, "qemu-ga"))
					}
					if st, err := acctest.GuestExec(env.URI, unix.prefix+"vm", "/sbin/fsfreeze", "--unfreeze", "/"); err == nil || !strings.Contains(err.Error(), "Invalid argument") {
						// EINVAL: / is not frozen any more
						return fmt.Errorf("the guest's / is still frozen after the snapshot (fsfreeze --unfreeze: %q, %v)", st, err)
					}
					return nil
				},
			},
			{
				PreConfig: func() {
					cmd := `{"execute":"guest-exec","arguments":{"path":"/bin/systemctl","arg":["stop","kohaku-report.service"]}}`
					if out, err := acctest.Virsh(env.URI, "qemu-agent-command", stopped.prefix+"vm", cmd); err != nil {
						t.Fatalf("stopping the agent in the guest: %v: %s", err, out)
					}
					time.Sleep(3 * time.Second) // systemctl runs in the guest after guest-exec returns
				},
				Config:      cfg + healthOf(stopped, "  timeout = \"5s\"\n"),
				ExpectError: regexp.MustCompile(`(?s)No heartbeat from VM ` + regexp.QuoteMeta(stopped.prefix) + `vm.*sent\s+no\s+heartbeat\s+within\s+5(\.\d)?s.*domain\s+is\s+running.*systemctl\s+status\s+kohaku-report.*allow_silent`),
			},
			{
				Config: cfg + healthOf(unix, "") + healthOf(stopped, "  timeout = \"3s\"\n  allow_silent = true\n"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.kohaku_vm_health."+stopped.res, tfjsonpath.New("reporting"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("data.kohaku_vm_health."+stopped.res, tfjsonpath.New("cpus"), knownvalue.Null()),
					statecheck.ExpectKnownValue("data.kohaku_vm_health."+stopped.res, tfjsonpath.New("gpus"), knownvalue.Null()),
					statecheck.ExpectKnownValue("data.kohaku_vm_health."+unix.res, tfjsonpath.New("reporting"), knownvalue.Bool(true)),
				},
			},
		},
	})
}

// checkHealthAgrees: a heartbeat read through the data source agrees with
// the domain (memory within what it was given), is young (under two
// intervals), and its cost to the guest is logged (the README's figures).
func checkHealthAgrees(t *testing.T, addr string, memoryMiB int64) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources[addr]
		if !ok {
			return fmt.Errorf("%s is not in state", addr)
		}
		a := rs.Primary.Attributes
		num := func(k string) float64 {
			v, _ := strconv.ParseFloat(a[k], 64)
			return v
		}
		if m := num("memory_total_mib"); m <= float64(memoryMiB)/2 || m > float64(memoryMiB) {
			return fmt.Errorf("%s: memory_total_mib %v for a domain of %d MiB", addr, m, memoryMiB)
		}
		if m := num("memory_available_mib"); m <= 0 || m > num("memory_total_mib") {
			return fmt.Errorf("%s: memory_available_mib %v of %v", addr, m, num("memory_total_mib"))
		}
		if d := num("disk_total_mib"); d <= 0 || num("disk_free_mib") > d {
			return fmt.Errorf("%s: disk %v MiB free of %v", addr, num("disk_free_mib"), d)
		}
		if age := num("age_seconds"); age < 0 || age >= 2*num("interval_seconds") {
			return fmt.Errorf("%s: a heartbeat %v s old, want under two intervals (%v s)", addr, age, 2*num("interval_seconds"))
		}
		if num("uptime_seconds") <= 0 || num("heartbeat_bytes") <= 0 || num("agent_cpu_seconds") <= 0 {
			return fmt.Errorf("%s: uptime %s, heartbeat_bytes %s, agent_cpu_seconds %s", addr, a["uptime_seconds"], a["heartbeat_bytes"], a["agent_cpu_seconds"])
		}
		started, err := time.Parse(time.RFC3339, a["agent_started_at"])
		if err != nil {
			return fmt.Errorf("%s: agent_started_at %q: %v", addr, a["agent_started_at"], err)
		}
		reported, _ := time.Parse(time.RFC3339Nano, a["reported_at"])
		life := reported.Sub(started).Seconds()
		t.Logf("%s: heartbeat #%s of %s bytes, %s s old; agent used %s s CPU in %.0f s of life (%.2f%%, TCG); guest uptime %s s",
			addr, a["sequence"], a["heartbeat_bytes"], a["age_seconds"], a["agent_cpu_seconds"], life, 100*num("agent_cpu_seconds")/max(life, 1), a["uptime_seconds"])
		return nil
	}
}

// A guest whose report never comes over the channel (the create timeout is
// shorter than the boot): the same story as the other modes, the domain
// kept and tainted.
func TestAccReady_channelTimeout(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "ct")
	cfg := fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", env.URI) +
		readyResources(env, prefix, t.TempDir(), "test", "", "", "  timeouts {\n    create = \"40s\"\n  }")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config:      cfg,
				ExpectError: regexp.MustCompile(`(?s)failed at step\s+"wait for the guest to be ready".*VM\s+` + regexp.QuoteMeta(prefix) + `vm\s+did\s+not\s+report\s+ready:\s+the\s+wait\s+timed\s+out\s+after.*org\.kohaku\.report\.0\s+channel\s+through\s+libvirt.*The\s+domain\s+is\s+running.*kohaku-report.*serial\s+console.*kept\s+for\s+inspection`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: func(s *terraform.State) error {
					if out, err := acctest.Virsh(env.URI, "domstate", prefix+"vm"); err != nil || out != "running" {
						return fmt.Errorf("after the timeout the kept VM is %q (%v), want running", out, err)
					}
					rs := s.RootModule().Resources["kohaku_vm.test"]
					if rs == nil || !rs.Primary.Tainted {
						return fmt.Errorf("the kept VM is not in state as tainted: %+v", rs)
					}
					return nil
				},
			},
		},
	})
}

// A guest that never reaches the provider: create fails at the timeout with
// the story, and the VM is kept (tainted) for inspection, as documented.
func TestAccReady_timeoutKeepsTaintedVM(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "to")
	port := acctest.ClosedPort(t)
	// The seed phones home to a port nobody listens on; the VM's provider
	// listens on another one. Nothing will ever arrive.
	cfg := readyConfig(env, prefix, port, t.TempDir(), "  phone_home = true", "  wait_for = \"phone_home\"\n  timeouts {\n    create = \"40s\"\n  }")
	cfg = strings.Replace(cfg, fmt.Sprintf(`base_url       = "http://10.0.2.2:%d"`, port), `base_url       = "http://10.0.2.2:9"`, 1)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config:      cfg,
				ExpectError: regexp.MustCompile(`(?s)failed at step\s+"wait for the guest to be ready".*VM\s+` + regexp.QuoteMeta(prefix) + `vm\s+did\s+not\s+report\s+ready:\s+the\s+wait\s+timed\s+out\s+after.*http://10\.0\.2\.2:9/v1/phone-home/<token>.*The\s+domain\s+is\s+running.*serial\s+console.*kept\s+for\s+inspection`),
			},
			{
				// What is left: the domain, still running, in state as tainted.
				PreConfig: func() {
					if out, err := acctest.Virsh(env.URI, "domstate", prefix+"vm"); err != nil || out != "running" {
						t.Errorf("after the timeout the kept VM is %q (%v), want running", out, err)
					}
				},
				RefreshState: true,
				// Tainted: the next apply replaces it.
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					func(s *terraform.State) error {
						rs := s.RootModule().Resources["kohaku_vm.test"]
						if rs == nil || !rs.Primary.Tainted {
							return fmt.Errorf("the kept VM is not in state as tainted: %+v", rs)
						}
						return nil
					},
					// The host holds exactly what state records.
					faultCheckState(env, prefix),
				),
			},
		},
	})
}

// cloud-init errors fail the apply with the failing module named, read
// through the guest agent (no network path to the provider), and
// on_ready_failure = "destroy" leaves nothing behind.
func TestAccReady_guestAgentReportsCloudInitErrors(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "ga")
	cfg := readyConfig(env, prefix, acctest.ClosedPort(t), t.TempDir(), "",
		"  wait_for         = \"guest_agent\"\n  on_ready_failure = \"destroy\"\n  timeouts {\n    create = \"12m\"\n  }")
	cfg = strings.Replace(cfg, "      - sync\n", "      - sync\n      - exit 3\n", 1)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config:      cfg,
				ExpectError: regexp.MustCompile(`(?s)failed at step\s+"wait for the guest to be ready".*cloud-init\s+in\s+VM\s+` + regexp.QuoteMeta(prefix) + `vm\s+finished.*scripts[-_]user.*Rolled\s+back`),
			},
			{
				PreConfig: func() {
					if out, err := acctest.Virsh(env.URI, "domstate", prefix+"vm"); err == nil {
						t.Errorf("on_ready_failure = destroy left the domain (%s)", out)
					}
				},
				RefreshState: true,
				// Nothing of the VM is left, so the next apply creates it.
				ExpectNonEmptyPlan: true,
				Check: func(s *terraform.State) error {
					if rs := s.RootModule().Resources["kohaku_vm.test"]; rs != nil {
						return fmt.Errorf("a destroyed VM is still in state")
					}
					return nil
				},
			},
		},
	})
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
