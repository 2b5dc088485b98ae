# A VM is imported by domain name or UUID, after the key of the provider's
# hosts map for another host. Every attribute is read back from the domain
# (an overlay's base image from the overlay's backing file; a disk given by
# file path as the volume of the pool that holds the file), except
# shutdown_timeout, which starts at its default, and gpus: every
# passed-through device shows in hostdevs until the configuration moves it
# to gpus. The apply that moves a binding's functions to gpus changes
# nothing on the host (no redefine, no restart); the plan after it is empty.
#
# A domain Kohaku did not make imports as it is: attributes the
# configuration leaves unset keep the domain's values, and what no
# attribute describes (a display, other disks, input devices, a
# description, other tools' metadata) is named in a warning and kept on
# every update. See "Adopting a domain made by hand" above.
terraform import kohaku_vm.gpu gpu-worker-1
terraform import kohaku_vm.gpu 6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b
terraform import kohaku_vm.gpu gpu2/gpu-worker-1
