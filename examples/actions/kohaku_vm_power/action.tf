# Shut the VM named web down cleanly, forcing it off if it has not powered off a few
# seconds before the timeout:
#   terraform apply -invoke=action.kohaku_vm_power.stop
action "kohaku_vm_power" "stop" {
  config {
    vm        = "web"
    operation = "shutdown"
    force     = true
    timeout   = "2m"
  }
}

# Start it again and return once the guest reports over its channel:
#   terraform apply -invoke=action.kohaku_vm_power.start
action "kohaku_vm_power" "start" {
  config {
    vm              = "web"
    operation       = "start"
    wait_for_report = true
    timeout         = "10m"
  }
}
