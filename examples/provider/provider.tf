# The default host: a local libvirtd. Without uri, KOHAKU_URI, then
# LIBVIRT_DEFAULT_URI, then qemu:///system is used.
provider "kohaku" {
  uri = "qemu:///system"
}

# A remote host over SSH, spoken in-process (no ssh binary needed), plus a
# fleet of further hosts that resources pick with their `host` argument.
provider "kohaku" {
  alias = "fleet"
  uri   = "qemu+ssh://root@gpu1.example.com/system"

  ssh = {
    key_file           = "~/.ssh/id_ed25519"
    known_hosts_verify = "normal"
  }

  hosts = {
    gpu2 = { uri = "qemu+ssh://root@gpu2.example.com/system" }
    gpu3 = {
      uri = "qemu+tls://gpu3.example.com/system"
      tls = { pki_path = "/etc/kohaku/pki/gpu3" }
    }
  }

  call_timeout = "2m"
}
