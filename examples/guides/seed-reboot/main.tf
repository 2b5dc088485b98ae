# A seed change power-cycles the VM instead of replacing it (Terraform 1.14
# or later). The seed is written anew with a new instance id; once the VM
# starts again, cloud-init sees a new instance and runs again on the same
# disk. A reboot would not do: the running QEMU keeps the old seed file open.
terraform {
  required_version = ">= 1.14"
  required_providers {
    kohaku = { source = "kohaku/kohaku" }
  }
}

resource "kohaku_seed" "web" {
  name     = "web-seed.iso"
  pool     = "default"
  hostname = "web"
  write_files = [{
    path    = "/etc/motd"
    content = "Welcome to web, release 2.\n"
  }]
}

resource "kohaku_vm" "web" {
  name       = "web"
  memory_mib = 2048
  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
  seed_id = kohaku_seed.web.id
}

# The actions name the VM, which depends on the seed, so the trigger sits on
# a resource that follows both: it changes when the seed's instance id does.
# The actions of one trigger run in the order listed.
resource "terraform_data" "web_seed" {
  input = kohaku_seed.web.instance_id

  lifecycle {
    action_trigger {
      events  = [after_update]
      actions = [action.kohaku_vm_power.stop_web, action.kohaku_vm_power.start_web]
    }
  }

  depends_on = [kohaku_vm.web]
}

action "kohaku_vm_power" "stop_web" {
  config {
    vm        = kohaku_vm.web.id
    operation = "shutdown"
  }
}

action "kohaku_vm_power" "start_web" {
  config {
    vm              = kohaku_vm.web.id
    operation       = "start"
    wait_for_report = true
  }
}
