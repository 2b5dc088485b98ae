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

locals {
  # Free GPUs per host: display-class functions not already held for
  # passthrough (kohaku_gpu_binding moves a GPU to vfio-pci). A host that is
  # down has no gpus list; it keeps its place below, as for worker_hosts.
  free_gpus = {
    for name, h in data.kohaku_host.each : name => [
      for g in(h.reachable ? coalesce(h.gpus, []) : []) : g if g.driver != "vfio-pci"
    ]
  }

  # Hosts with at least one free GPU, with the NUMA node of the first one
  # and that node's CPUs and free memory, to size and place a GPU worker.
  gpu_hosts = {
    for name, gpus in local.free_gpus : name => {
      gpu       = try(gpus[0].address, null)
      numa_node = try(gpus[0].numa_node, null)
      node = try(one([
        for n in data.kohaku_host.each[name].numa_nodes : n if n.id == coalesce(gpus[0].numa_node, 0)
      ]), null)
    } if !data.kohaku_host.each[name].reachable || length(gpus) > 0
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

output "gpu_hosts" {
  description = "Hosts with a free GPU: its address, its NUMA node, and that node's CPUs, free memory and free 2 MiB pages."
  value = {
    for name, h in local.gpu_hosts : name => {
      gpu             = h.gpu
      numa_node       = h.numa_node
      cpuset          = try(h.node.cpuset, null)
      free_memory_mib = try(h.node.free_memory_mib, null)
      free_2m_pages   = try(one([for p in h.node.hugepages : p.free if p.size_kib == 2048]), null)
    }
  }
}
