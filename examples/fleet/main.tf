# A fleet of GPU hosts behind one provider block: a seed and a VM per host,
# spread with for_each. Each host's connection opens on first use; a host that
# is down fails only the resources placed on it.
terraform {
  required_version = ">= 1.11"
  required_providers {
    kohaku = {
      source = "kohaku/kohaku"
    }
  }
}

variable "hosts" {
  description = "Host name => libvirt URI."
  type        = map(string)
  default = {
    gpu1 = "qemu+ssh://root@gpu1.example.com/system"
    gpu2 = "qemu+ssh://root@gpu2.example.com/system"
  }
}

variable "ssh_public_key" {
  type    = string
  default = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJfaz/mJ/6BFYscLuJLZ6JlVggOhzDZ+dRREhnzJc1sZ you@laptop"
}

provider "kohaku" {
  # The default connection is not used by this configuration; every resource
  # names its host.
  hosts = { for name, uri in var.hosts : name => { uri = uri } }

  ssh = {
    known_hosts_verify = "normal"
  }
}

# What each host offers, e.g. to pick hosts with enough memory. A host that
# is down reads as reachable = false (with a warning) instead of failing the
# whole plan.
data "kohaku_host" "each" {
  for_each          = var.hosts
  host              = each.key
  allow_unreachable = true
}

locals {
  # Hosts with at least 64 GiB of memory get a worker. A host that is down
  # stays in: dropping it would plan to destroy its worker. Its resources
  # fail until it is back; the other hosts' go ahead in the same apply.
  worker_hosts = { for name, h in data.kohaku_host.each : name => h if !h.reachable || coalesce(h.memory_mib, 0) >= 65536 }
}

# What each host has free now: per NUMA node its CPUs, free memory and huge
# pages, and its GPUs with their state and who holds them. It is read fresh
# on every plan, so use it to look (the outputs below), not to choose hosts
# for VMs in HCL: a choice made from it changes as the fleet fills.
data "kohaku_capacity" "fleet" {
  hosts = keys(var.hosts)
}

locals {
  # Free GPUs per host: no VM's claim, no domain and no host process has
  # them, whatever driver they are on (a GPU bound to vfio-pci that no VM
  # uses is free; one on its host driver that a CUDA job has open is not).
  # A host that is down has no GPUs here; its error is in down_hosts.
  free_gpus = {
    for name, c in data.kohaku_capacity.fleet.capacity : name => [
      for g in c.gpus : g if g.state == "free"
    ]
  }
}

# The vendor's image on every worker host: downloaded and verified once on
# the machine running Terraform (cached by digest), uploaded to each host
# over its libvirt connection. No download or tool on the hosts.
resource "kohaku_image" "debian12" {
  for_each     = local.worker_hosts
  host         = each.key
  pool         = "default"
  name         = "debian-12-genericcloud-amd64.qcow2"
  source       = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
  checksum_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
}

resource "kohaku_seed" "worker" {
  for_each = local.worker_hosts
  host     = each.key
  name     = "worker-${each.key}-seed.iso"
  hostname = "worker-${each.key}"

  user = {
    name                = "kohaku"
    ssh_authorized_keys = [var.ssh_public_key]
  }
  network = [{ dhcp4 = true }]
}

resource "kohaku_vm" "worker" {
  for_each   = local.worker_hosts
  host       = each.key
  name       = "worker-${each.key}"
  type       = coalesce(each.value.kvm_available, true) ? "kvm" : "qemu"
  vcpu       = 8
  memory_mib = 16384

  # Each worker's overlay on the image of its own host (its id names the
  # host; another host's image would be refused at plan time).
  disk = {
    image    = kohaku_image.debian12[each.key].id
    pool     = "default"
    size_gib = 40
  }

  seed_id           = kohaku_seed.worker[each.key].id
  network_interface = [{ type = "network", source = "default" }]
  # The default wait reads each guest's report over its own host's libvirt
  # connection: no route from the guests back to Terraform is needed.
}

output "workers" {
  value = { for name, vm in kohaku_vm.worker : name => vm.uuid }
}

output "free_gpus" {
  description = "Free GPUs per host: address, model, NUMA node, and that node's free memory and CPUs no VM has pinned."
  value = {
    for name, gpus in local.free_gpus : name => [
      for g in gpus : {
        address   = g.address
        model     = g.model
        numa_node = g.numa_node
        node = try(one([
          for n in data.kohaku_capacity.fleet.capacity[name].numa_nodes : {
            free_memory_mib = n.free_memory_mib
            unpinned_cpus   = n.cpus - n.pinned_cpus
          } if n.id == g.numa_node
        ]), null)
      }
    ]
  }
}

output "gpu_holders" {
  description = "GPUs that are not free, per host: claimed or in use by a VM, held by a host process, or quarantined, with who holds them."
  value = {
    for name, c in data.kohaku_capacity.fleet.capacity : name => {
      for g in c.gpus : g.address => "${g.state}: ${g.holder}" if g.state != "free"
    }
  }
}

output "down_hosts" {
  description = "Hosts that could not be read, with why."
  value       = { for name, c in data.kohaku_capacity.fleet.capacity : name => c.error if !c.up }
}
