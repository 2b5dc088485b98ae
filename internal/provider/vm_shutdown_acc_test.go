package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// The graceful shutdown test's two guests: "clean" powers off on the ACPI
// power button, as a cloud image does (systemd-logind handles it); "deaf"
// is the same image told to ignore it (logind's HandlePowerKey=ignore).
// Neither has the guest agent channel, so libvirt's shutdown request is the
// ACPI power button alone.
//
// The clean guest's shutdown_timeout (and the update and delete timeouts,
// which bound it) is far longer than any TCG guest needs
// to power off, however loaded the machine: the test judges what the
// provider controls (it asks, repeats the request, returns as soon as the
// guest is off, forces only after the timeout and warns then), not how fast
// an emulated guest shuts down. The deaf guest's is short, since it is
// always forced off.
const (
	shutdownCleanTimeout = 30 * time.Minute
	shutdownDeafTimeout  = 10 * time.Second
)

// shutdownGuest is one guest of the test as a step configures it.
type shutdownGuest struct {
	present bool
	memory  int
	running bool
}

func shutdownConfig(env acctest.VMEnv, prefix string, clean, deaf shutdownGuest) string {
	vm := func(label string, g shutdownGuest, timeout time.Duration, seedExtra string) string {
		if !g.present {
			return ""
		}
		return fmt.Sprintf(`
resource "kohaku_seed" %[1]q {
  name     = "%[2]s%[1]s-seed.iso"
  pool     = %[3]q
  hostname = %[1]q
  network = [{
    addresses   = ["10.0.2.15/24"]
    gateway4    = "10.0.2.2"
    nameservers = ["10.0.2.3"]
  }]
%[4]s  user_data = <<-EOT
    #cloud-config
    runcmd:
      - [sh, -c, 'if [ -e /etc/systemd/logind.conf.d/kohaku-deaf.conf ]; then systemctl restart systemd-logind.service; fi']
      - [systemctl, enable, --now, kohaku-logind-up.service]
      - [sh, -c, 'echo "kohaku-acpi: logind $(systemctl is-active systemd-logind.service), dbus $(systemctl is-active dbus.service), power key $(cat /etc/systemd/logind.conf.d/kohaku-deaf.conf 2>/dev/null | grep -o "HandlePowerKey=.*" || echo default)" > /dev/ttyS0']
  EOT
}

resource "kohaku_vm" %[1]q {
  name       = "%[2]s%[1]s"
  type       = "qemu"
  vcpu       = 1
  cpu_mode   = "custom"
  memory_mib = %[5]d
  running    = %[6]t
  kernel     = %[7]q
  initrd     = %[8]q
  cmdline    = "root=/dev/vda rw console=ttyS0 panic=5"
  seed_id    = kohaku_seed.%[1]s.id

  disk = {
    base_pool   = %[9]q
    base_volume = %[10]q
    pool        = %[3]q
  }
  network_interface = [{ type = "user" }]
  guest_agent       = false
  shutdown_timeout  = %[11]q
  destroy_shutdown  = "graceful"
  timeouts {
    create = "30m"
    update = "40m"
    delete = "40m"
  }
}
`, label, prefix, env.Pool, seedExtra, g.memory, g.running, env.Kernel, env.Initrd, env.ImagePool, env.Base, timeout.String())
	}
	// On every boot, once logind runs, a line on the console says so
	// (consoleLogind): the waits between steps count those lines, since
	// systemd stops printing unit status to the console once the login
	// prompt is up, and on a loaded machine logind can start after that.
	logindUp := `{
    path    = "/etc/systemd/system/kohaku-logind-up.service"
    content = "[Unit]\nAfter=systemd-logind.service\nRequires=systemd-logind.service\n[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo kohaku-acpi: logind up > /dev/ttyS0'\n[Install]\nWantedBy=multi-user.target\n"
  }`
	cleanFiles := "  write_files = [" + logindUp + "]\n"
	deafFiles := `  write_files = [` + logindUp + `, {
    path    = "/etc/systemd/logind.conf.d/kohaku-deaf.conf"
    content = "[Login]\nHandlePowerKey=ignore\n"
  }]
`
	return providerBlock(env.URI) + vm("clean", clean, shutdownCleanTimeout, cleanFiles) + vm("deaf", deaf, shutdownDeafTimeout, deafFiles)
}

var (
	// consolePowerDown is what the guest kernel prints last when it powers
	// off (after systemd stopped everything); a forced off prints nothing.
	consolePowerDown = regexp.MustCompile(`reboot: Power down`)
	// consoleLogind is the guest's kohaku-logind-up.service saying that
	// logind, which handles the power button, runs on this boot.
	consoleLogind = regexp.MustCompile(`kohaku-acpi: logind up`)
	// libvirtStop is the line libvirt writes to the domain's log when its
	// QEMU ends: reason=shutdown when the guest powered off,
	// reason=destroyed when it was forced off.
	libvirtStop = regexp.MustCompile(`(?m)^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}[+-]\d{4}): shutting down, reason=(\w+)`)
)

func readConsole(name string) string {
	b, _ := os.ReadFile(domain.DefaultSerialLogPath(name))
	return string(b)
}

// libvirtStops are the stops libvirt logged for the domain: their times
// and reasons, in order.
func libvirtStops(name string) ([]time.Time, []string) {
	b, _ := os.ReadFile(filepath.Join("/var/log/libvirt/qemu", name+".log"))
	var at []time.Time
	var why []string
	for _, m := range libvirtStop.FindAllStringSubmatch(string(b), -1) {
		t, err := time.Parse("2006-01-02 15:04:05.000-0700", m[1])
		if err != nil {
			continue
		}
		at, why = append(at, t), append(why, m[2])
	}
	return at, why
}

// warningRecorder keeps every warning diagnostic the provider under test
// returns to Terraform from an apply (which Terraform shows to the user), so
// a test can count them without a log file or the process environment.
type warningRecorder struct {
	mu    sync.Mutex
	warns []*tfprotov6.Diagnostic
}

// warningServer is the provider, served for one Terraform command, with
// its apply warnings recorded.
type warningServer struct {
	tfprotov6.ProviderServer
	rec *warningRecorder
}

func (s *warningServer) ApplyResourceChange(ctx context.Context, req *tfprotov6.ApplyResourceChangeRequest) (*tfprotov6.ApplyResourceChangeResponse, error) {
	resp, err := s.ProviderServer.ApplyResourceChange(ctx, req)
	if resp != nil {
		s.rec.mu.Lock()
		for _, d := range resp.Diagnostics {
			if d.Severity == tfprotov6.DiagnosticSeverityWarning {
				s.rec.warns = append(s.rec.warns, d)
			}
		}
		s.rec.mu.Unlock()
	}
	return resp, err
}

// factories serves a fresh provider for each Terraform command, recording
// its warnings.
func (r *warningRecorder) factories() map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"kohaku": func() (tfprotov6.ProviderServer, error) {
			s, err := protoV6Providers["kohaku"]()
			if err != nil {
				return nil, err
			}
			return &warningServer{ProviderServer: s, rec: r}, nil
		},
	}
}

// forcedOff counts the provider's "the guest was forced off" warnings for
// the VM name, and returns the last one's summary and detail.
func (r *warningRecorder) forcedOff(name string) (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, last := 0, ""
	for _, d := range r.warns {
		if strings.Contains(d.Summary, "VM "+name+": the guest was forced off") {
			n, last = n+1, d.Summary+": "+d.Detail
		}
	}
	return n, last
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// A guest that honours ACPI powers off cleanly, well within its
// shutdown_timeout, when the provider restarts it for an update
// (memory_mib) and when it destroys it (destroy_shutdown = "graceful")
// while it is still booting, by repeating the request: the kernel's
// "reboot: Power down" on its console and libvirt's reason=shutdown prove
// each. The same image told to ignore the power button is forced off after
// its shutdown_timeout on a restart and on destroy (reason=destroyed, no
// power-down on its console), and the provider says so in a warning each
// time. Two guests, four boots, under TCG. A stop with running = false
// takes the same StopDomain as the restart (vmlife.Restarts, unit-tested
// in update_test.go).
func TestAccVM_gracefulShutdown(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "acpi")
	cleanName, deafName := prefix+"clean", prefix+"deaf"
	// The warnings the provider returns to Terraform.
	recorded := &warningRecorder{}

	var began time.Time
	start := func() { began = time.Now() }
	// stopped checks the guest's last stop: the count of clean power-downs
	// on its console and libvirt's reasons so far, how long the step took
	// against the guest's shutdown_timeout (a clean stop ends the step
	// before the timeout could have run out: the provider returned when the
	// guest was off, it did not wait the timeout out; a forced one comes
	// no earlier than the timeout), and the provider's warnings.
	stopped := func(name string, timeout time.Duration, powerDowns int, reasons string, warnings int) resource.TestCheckFunc {
		return func(*terraform.State) error {
			took := time.Since(began)
			at, why := libvirtStops(name)
			downs := len(consolePowerDown.FindAllStringIndex(readConsole(name), -1))
			warned, line := recorded.forcedOff(name)
			off := "?"
			if len(at) > 0 {
				off = at[len(at)-1].Sub(began).Round(100 * time.Millisecond).String()
			}
			t.Logf("%s: step took %s (shutdown_timeout %s); powered off %s after the step began, libvirt reasons %v; console power-downs %d; forced-off warnings %d",
				name, took.Round(100*time.Millisecond), timeout, off, why, downs, warned)
			if got := strings.Join(why, ","); got != reasons {
				return fmt.Errorf("%s: libvirt logged stops %q, want %q", name, got, reasons)
			}
			if downs != powerDowns {
				return fmt.Errorf("%s: %d clean power-downs on its console, want %d", name, downs, powerDowns)
			}
			if warned != warnings {
				return fmt.Errorf("%s: %d forced-off warnings from the provider, want %d", name, warned, warnings)
			}
			if line != "" && !strings.Contains(line, "shutdown_timeout ("+timeout.String()+")") {
				return fmt.Errorf("%s: the warning does not name the shutdown_timeout %s: %s", name, timeout, line)
			}
			if line != "" {
				t.Logf("%s: the provider's warning: %s", name, line)
			}
			// The step began before Terraform planned, so this is an upper
			// bound of the time from the request to the power-off.
			last := at[len(at)-1].Sub(began)
			if clean := strings.HasSuffix(reasons, "shutdown"); clean && took >= timeout {
				return fmt.Errorf("%s powered off cleanly %s after the step began, but the step took %s: the provider waited out its shutdown_timeout %s instead of returning when the guest was off", name, last, took, timeout)
			} else if !clean && last < timeout {
				return fmt.Errorf("%s was forced off %s after the step began, before its shutdown_timeout %s", name, last, timeout)
			}
			return nil
		}
	}
	noPowerDown := func(name string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if _, why := libvirtStops(name); len(why) > 0 {
				return fmt.Errorf("%s stopped (%v) in a step that does not touch it", name, why)
			}
			return nil
		}
	}
	consoleSays := func(name, want string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if c := readConsole(name); !strings.Contains(c, want) {
				return fmt.Errorf("the console of %s lacks %q; tail:\n%s", name, want, tail(c, 1500))
			}
			return nil
		}
	}
	both := func(cleanMem int, cleanRunning bool, deafMem int) string {
		return shutdownConfig(env, prefix, shutdownGuest{true, cleanMem, cleanRunning}, shutdownGuest{true, deafMem, true})
	}
	update := func(addr string) resource.ConfigPlanChecks {
		return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)}}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: recorded.factories(),
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				// Both guests boot and report ready: logind runs in both
				// (the test image has dbus, as cloud images do); deaf's
				// is told to ignore the power key.
				Config: both(768, true, 768),
				Check: resource.ComposeAggregateTestCheckFunc(
					acctest.CheckDomState(env, cleanName, "running"), acctest.CheckDomState(env, deafName, "running"),
					consoleSays(cleanName, "kohaku-acpi: logind active, dbus active, power key default"),
					consoleSays(deafName, "kohaku-acpi: logind active, dbus active, power key HandlePowerKey=ignore"),
					noPowerDown(cleanName), noPowerDown(deafName)),
			},
			{
				// An update that restarts: clean powers off on the button.
				PreConfig:        start,
				Config:           both(896, true, 768),
				ConfigPlanChecks: update("kohaku_vm.clean"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_vm.clean", tfjsonpath.New("memory_mib"), knownvalue.Int64Exact(896)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(acctest.CheckDomState(env, cleanName, "running"),
					stopped(cleanName, shutdownCleanTimeout, 1, "shutdown", 0)),
			},
			{
				// The same update of deaf: forced off after its timeout.
				PreConfig:        start,
				Config:           both(896, true, 896),
				ConfigPlanChecks: update("kohaku_vm.deaf"),
				Check: resource.ComposeAggregateTestCheckFunc(acctest.CheckDomState(env, deafName, "running"),
					stopped(deafName, shutdownDeafTimeout, 0, "destroyed", 1)),
			},
			{
				// Destroy both (destroy_shutdown = "graceful") while their
				// second boots are still coming up (clean's logind is up
				// about two minutes later under load): clean's first
				// request is lost, as on real hardware, and the provider
				// repeats it every 5 s, so the guest still powers off
				// cleanly once it listens instead of being forced off at
				// the end of its shutdown_timeout; deaf is forced off
				// after its timeout, with the warning.
				PreConfig: func() {
					if n := len(consoleLogind.FindAllStringIndex(readConsole(cleanName), -1)); n >= 2 {
						t.Logf("%s: boot 2 had already started logind: this step shows the plain case, not the repeated request", cleanName)
					}
					start()
				},
				Config: providerBlock(env.URI),
				Check: resource.ComposeAggregateTestCheckFunc(acctest.CheckNothingLeft(env, prefix),
					stopped(cleanName, shutdownCleanTimeout, 2, "shutdown,shutdown", 0),
					stopped(deafName, shutdownDeafTimeout, 0, "destroyed,destroyed", 2)),
			},
		},
	})
}
