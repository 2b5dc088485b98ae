# The live health of a VM, read over the libvirt connection (no network path
# to the guest): its seed's health agent answers within about a second.
data "kohaku_vm_health" "trainer" {
  name = "trainer" # or kohaku_vm.trainer.name
}

output "trainer_health" {
  value = {
    age_seconds       = data.kohaku_vm_health.trainer.age_seconds
    load_average      = data.kohaku_vm_health.trainer.load_average
    memory_free       = "${data.kohaku_vm_health.trainer.memory_available_mib} of ${data.kohaku_vm_health.trainer.memory_total_mib} MiB"
    cloud_init_status = data.kohaku_vm_health.trainer.cloud_init_status
    gpus = [for g in data.kohaku_vm_health.trainer.gpus :
    "${g.name}: ${g.utilization_percent}% busy, ${g.memory_used_mib}/${g.memory_total_mib} MiB, ${g.temperature_c} C"]
  }
}

# A fleet-wide view that does not fail on a VM that is down or silent.
data "kohaku_vm_health" "worker" {
  for_each     = toset(["worker-1", "worker-2"])
  host         = "gpu-node-1"
  name         = each.key
  timeout      = "5s"
  allow_silent = true
}

output "silent_workers" {
  value = [for name, h in data.kohaku_vm_health.worker : name if !h.reporting]
}
