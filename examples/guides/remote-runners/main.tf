# Terraform Cloud, Spacelift, Atlantis or a CI job: no ~/.ssh, no ssh-agent,
# no /etc/pki/libvirt. Every credential is a value from a (sensitive)
# variable instead of a file.

variable "gpu1_ssh_key" {
  description = "The private key's text."
  type        = string
  sensitive   = true
}

variable "gpu1_host_key" {
  description = "The host's public key, e.g. the content of /etc/ssh/ssh_host_ed25519_key.pub."
  type        = string
}

variable "gpu2_ca_cert" {
  description = "PEM text of cacert.pem."
  type        = string
}

variable "gpu2_client_cert" {
  description = "PEM text of clientcert.pem."
  type        = string
}

variable "gpu2_client_key" {
  description = "PEM text of clientkey.pem."
  type        = string
  sensitive   = true
}

provider "kohaku" {
  uri = "qemu+ssh://root@gpu1.example.com/system"
  ssh = {
    private_key = var.gpu1_ssh_key
    # Pinned: any other key is refused, and no known_hosts file is read or written.
    host_key = var.gpu1_host_key
  }

  hosts = {
    gpu2 = {
      uri = "qemu+tls://gpu2.example.com/system"
      tls = {
        ca_cert     = var.gpu2_ca_cert
        client_cert = var.gpu2_client_cert
        client_key  = var.gpu2_client_key
      }
    }
  }
}

data "kohaku_host" "gpu1" {}

data "kohaku_host" "gpu2" {
  host = "gpu2"
}

output "hosts" {
  value = {
    gpu1 = data.kohaku_host.gpu1.libvirt_version
    gpu2 = data.kohaku_host.gpu2.libvirt_version
  }
}
