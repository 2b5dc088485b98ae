# A seed's shared folders under the names kohaku_vm.shared_folder uses.
# The former names (type, readonly) still work, with a warning, until the
# next major release; renaming them changes nothing in the guest.
resource "kohaku_seed" "web" {
  name     = "web-seed.iso"
  hostname = "web"

  shared_folders = [{
    tag       = "kohaku_shared"
    path      = "/shared"
    driver    = "virtiofs" # was: type = "virtiofs"
    read_only = true       # was: readonly = true
  }]
}
