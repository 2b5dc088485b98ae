# lspci prints 41:00.0 and virsh nodedev-list pci_0000_41_00_0; both give
# "0000:41:00.0", the form kohaku_gpu_binding takes.
variable "gpu" {
  type    = string
  default = "pci_0000_41_00_0"
}

resource "kohaku_gpu_binding" "gpu" {
  address = provider::kohaku::pci_address(var.gpu)
}
