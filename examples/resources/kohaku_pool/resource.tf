# A directory pool for a bare host: the directory is made when missing, the
# pool started and marked to start with the host.
resource "kohaku_pool" "vms" {
  name = "vms"
  path = "/var/lib/libvirt/images/vms"
}

# Images, seeds and VM disks go into it by name.
resource "kohaku_image" "debian12" {
  name         = "debian-12-genericcloud-amd64.qcow2"
  pool         = kohaku_pool.vms.name
  source       = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
  checksum_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
}

# A scratch pool whose volumes may go with it: destroy deletes whatever it
# holds instead of refusing.
resource "kohaku_pool" "scratch" {
  host          = "gpu2"
  name          = "scratch"
  path          = "/srv/scratch"
  force_destroy = true
}
