# A NoCloud seed for one VM: a login user with a key and two more accounts,
# time zone, locale and packages, a static address on the NIC whose MAC is
# derived from the seed's name, two 9p shared folders, and a file. kohaku_vm
# reads the MAC back from the seed, so the VM needs only seed_id.
variable "ssh_public_key" {
  type        = string
  description = "Public key allowed to log in as kohaku, e.g. file(\"~/.ssh/id_ed25519.pub\")."
  default     = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJfaz/mJ/6BFYscLuJLZ6JlVggOhzDZ+dRREhnzJc1sZ you@laptop"
}

variable "alice_password_hash" {
  type        = string
  description = "crypt(3) hash of alice's password, e.g. from mkpasswd --method=SHA-512."
  sensitive   = true
  ephemeral   = true
}

resource "kohaku_seed" "web" {
  name     = "web-1-seed.iso"
  pool     = "default"
  hostname = "web-1"

  user = {
    name                = "kohaku"
    ssh_authorized_keys = [var.ssh_public_key]
  }

  # Further accounts, each with its own keys, groups, sudo rule and password
  # hash (mkpasswd --method=SHA-512; a plain password is refused at plan).
  users = [
    {
      name                = "alice"
      groups              = ["adm", "video"]
      sudo                = "ALL=(ALL) ALL"
      ssh_authorized_keys = [var.ssh_public_key]
      password_hash_wo    = var.alice_password_hash # never stored in state
    },
    { name = "batch", shell = "/usr/sbin/nologin" },
  ]

  timezone   = "Asia/Tokyo"
  locale     = "en_US.UTF-8"
  packages   = ["htop", "jq"]
  ssh_pwauth = false

  # The guest's health agent answers data.kohaku_vm_health; 0 turns it off.
  heartbeat_interval = 30

  network = [{
    addresses   = ["10.0.2.15/24"]
    gateway4    = "10.0.2.2"
    nameservers = ["10.0.2.3"]
  }]

  # Each folder takes the names of kohaku_vm's shared_folder: driver
  # (9p by default, or virtiofs) and read_only.
  shared_folders = [
    { tag = "kohaku_shared", path = "/shared", read_only = true },
    { tag = "kohaku_local", path = "/local_temp", driver = "9p" },
  ]

  write_files = [{
    path        = "/etc/motd"
    content     = "Provisioned by Kohaku\n"
    permissions = "0644"
  }]

  # Your own cloud-config is kept byte for byte and merged with the generated
  # part: its runcmd runs after Kohaku's.
  user_data = <<-EOT
    #cloud-config
    runcmd:
      - echo "hello from user data" > /var/tmp/hello
  EOT
}

# Secrets in user data can stay out of state (Terraform 1.11+).
variable "bootstrap_token" {
  type      = string
  sensitive = true
  ephemeral = true
}

resource "kohaku_seed" "worker" {
  name   = "worker-1-seed.iso"
  format = "configdrive"

  network = [{ dhcp4 = true }]

  user_data_wo = <<-EOT
    #cloud-config
    write_files:
      - path: /etc/worker/token
        permissions: "0600"
        content: ${var.bootstrap_token}
  EOT
}
