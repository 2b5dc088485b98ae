package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hostEnv is the acceptance host the benchmark runs against.
type hostEnv struct {
	URI, Pool, ImagePool, Base, Kernel, Initrd string
	// Running starts the VMs (Kernel and Initrd are then the tiny test
	// guest's), so a refresh asks each one's guest agent as well.
	Running bool
}

// kohakuConfig is n seeds and n VMs, each VM on its seed: defined, not
// started (unless h.Running: then 96 MiB tiny guests, ready over their
// channel), with a qcow2 overlay on the test image and direct kernel boot.
// The seed is the README's typical one (login user with a key, static
// address on a MAC derived from the seed's name, a shared folder it
// mounts); the VM's NIC takes that MAC from the seed, and the VM exports
// the share (/tmp: a local host's source must exist).
func kohakuConfig(h hostEnv, prefix string, n int) string {
	memory, cmdline := 128, "root=/dev/vda rw console=ttyS0"
	if h.Running {
		memory, cmdline = 96, "console=ttyS0 quiet mitigations=off no_timer_check panic=1"
	}
	return fmt.Sprintf(`terraform {
  required_providers {
    kohaku = { source = "kohaku/kohaku" }
  }
}

variable "uri" {
  type    = string
  default = %[1]q
}

provider "kohaku" {
  uri = var.uri
}

resource "kohaku_seed" "s" {
  count    = %[2]d
  name     = "%[3]s${count.index}-seed.iso"
  pool     = %[4]q
  hostname = "bench-${count.index}"

  user = {
    name                = "kohaku"
    ssh_authorized_keys = [%[9]q]
  }

  network = [{
    addresses   = ["10.0.2.15/24"]
    gateway4    = "10.0.2.2"
    nameservers = ["10.0.2.3"]
  }]

  shared_folders = [{ tag = "kohaku_shared", path = "/shared" }]
}

resource "kohaku_vm" "v" {
  count      = %[2]d
  name       = "%[3]s${count.index}"
  type       = "qemu"
  memory_mib = %[11]d
  running    = %[10]t

  kernel  = %[7]q
  initrd  = %[8]q
  cmdline = %[12]q

  disk = {
    base_pool   = %[5]q
    base_volume = %[6]q
    pool        = %[4]q
  }

  seed_id           = kohaku_seed.s[count.index].id
  network_interface = [{ type = "user" }]
  shared_folder     = [{ source = "/tmp", tag = "kohaku_shared" }]
}
`, h.URI, n, prefix, h.Pool, h.ImagePool, h.Base, h.Kernel, h.Initrd, sshKey, h.Running, memory, cmdline)
}

// terraformFloorConfig is the same graph in terraform_data: n "seeds" and n
// "VMs", each VM depending on its seed. terraform_data lives inside
// Terraform (no plugin process, no host), so this is Terraform core's cost.
func terraformFloorConfig(n int) string {
	return fmt.Sprintf(`resource "terraform_data" "s" {
  count = %[1]d
  input = "seed-${count.index}"
}

resource "terraform_data" "v" {
  count = %[1]d
  input = terraform_data.s[count.index].output
}
`, n)
}

const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJfaz/mJ/6BFYscLuJLZ6JlVggOhzDZ+dRREhnzJc1sZ bench@kohaku"

// cliConfig serves the provider from dir without any registry access.
func cliConfig(dir string) string {
	return fmt.Sprintf(`provider_installation {
  dev_overrides {
    "kohaku/kohaku" = %q
  }
  direct {}
}
`, dir)
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// parseInts reads "10,50,200".
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var v int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &v); err != nil || v < 1 {
			return nil, fmt.Errorf("bad count %q in %q", f, s)
		}
		out = append(out, v)
	}
	return out, nil
}
