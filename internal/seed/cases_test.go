package seed

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Test fixtures shared by the golden, ISO, cloud-init, fuzz and benchmark
// tests.

const (
	keyEd25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb3y8H6cXJmU0fYqWZ3Ydq0n8n1k6p3X2WcQe2r4k7T alice@laptop"
	keyRSA     = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCy+Axn0Zo/baq1dc0XJ8VXbYWl/OdTYsHQAvCRWz3F8GpPh1D/7ueUZmkng2udtUSsaJcOuSzgHlgpohaZ/78nigErcWbZ/yx1umEkw6LQ0wIcWOr+E9LNuozT05PbNkZfRuTfEJMDVDYBLK4WQoW3oh/eqIlgfIuVMF3R2KjBoBgC6qjabuTuccZ6xywfuZCLpf2MoAVBOi/rR6qS5GBiNabYMQzbLelZUEVKVjDpxuawrmPn1/KpkNhMo0Ro4Ai+L7IQhNDnNPTV9tFKYS/IioA5UB/gETtaj+V4fdfrPvcSkGwXcPTxlpuDsiG8BUB04KNjfk2oXzibnLV7c78J bob@ci"
)

func ptr[T any](v T) *T { return &v }

// typicalSpec is the seed most VMs get: a login user with keys, two
// shares, a static network and phone home.
func typicalSpec() *Spec {
	return &Spec{
		Name: "typical",
		User: &User{Name: "kohaku", SSHAuthorizedKeys: []string{keyEd25519, keyRSA}},
		Mounts: []Mount{
			{Type: Mount9P, Tag: "kohaku_shared", Path: "/shared"},
			{Type: Mount9P, Tag: "kohaku_local", Path: "/local_temp"},
		},
		Network: []NIC{{
			MAC:         "52:54:00:12:34:56",
			Addresses:   []string{"10.128.64.5/18"},
			Gateway4:    "10.128.64.1",
			Nameservers: []string{"8.8.8.8", "8.8.4.4"},
		}},
		PhoneHome: &PhoneHome{URL: "http://10.0.2.2:8080/phone-home/$INSTANCE_ID"},
	}
}

// fullSpec sets every option.
func fullSpec(f Format) *Spec {
	return &Spec{
		Name:               "gpu-vm-1",
		Format:             f,
		Hostname:           "gpu1",
		FQDN:               "gpu1.lab.example.com",
		PublicKeys:         []string{keyRSA},
		MetaData:           map[string]string{"availability-zone": "rack-1", "instance-id": "ignored", "owner": "on"},
		User:               &User{Name: "kohaku", Groups: []string{"docker", "video"}, SSHAuthorizedKeys: []string{keyEd25519}},
		RootAuthorizedKeys: true,
		PermitRootLogin:    true,
		Users: []User{
			{Name: "alice", Groups: []string{"adm"}, Sudo: ptr("ALL=(ALL) ALL"), SSHAuthorizedKeys: []string{keyRSA},
				PasswordHash: "$6$rounds=4096$kohakusalt$2qJGf0S3lVqO7Y9pC3cQ0eG1y7ZC9P5u0d3W5yJ0b8N2m1Yk7bqD0xZ3H9aX6vQ8rW4tE1uI2oP5aS7dF9gH0j."},
			{Name: "svc-batch", Shell: "/usr/sbin/nologin"},
		},
		Timezone:        "Asia/Tokyo",
		Locale:          "en_US.UTF-8",
		Packages:        []string{"htop", "curl", "jq=1.6-2.1"},
		PackageUpdate:   true,
		SSHPasswordAuth: ptr(false),
		WriteFiles: []File{
			{Path: "/etc/kohaku/agent.toml", Content: []byte("endpoint = \"http://10.0.2.2:8080\"\nenabled: yes\n"), Permissions: "0640", Owner: "kohaku:kohaku"},
			{Path: "/usr/local/bin/blob", Content: []byte{0x7f, 'E', 'L', 'F', 0, 1, 2, 0xff}, Permissions: "755"},
			{Path: "/etc/motd", Content: []byte("welcome\n"), Append: true},
		},
		Mounts: []Mount{
			{Type: Mount9P, Tag: "kohaku_shared", Path: "/shared", MSize: 262144},
			{Type: Mount9P, Tag: "datasets", Path: "/data", ReadOnly: true},
			{Type: MountVirtioFS, Tag: "fastfs", Path: "/fast"},
		},
		NVIDIA:         &NVIDIA{Version: "550.54.14", URLTemplate: "https://mirror.lab.example/nvidia/{version}/NVIDIA-Linux-x86_64-{version}.run"},
		QEMUGuestAgent: true,
		PhoneHome:      &PhoneHome{URL: "https://provisioner.example/ready/$INSTANCE_ID", Tries: 3},
		Network: []NIC{
			{
				ID:            "lan0",
				SetName:       "eth0",
				Addresses:     []string{"10.0.2.15/24", "2001:db8:0:1::15/64"},
				Gateway4:      "10.0.2.2",
				Gateway6:      "2001:db8:0:1::1",
				Nameservers:   []string{"10.0.2.3", "2001:db8::53"},
				SearchDomains: []string{"lab.example.com"},
			},
			{DHCP4: true, DHCP6: true},
			{MAC: "52:54:00:AB:CD:EF", Addresses: []string{"192.168.100.10/24", "fd00:100::10/64"}, Gateway6: "fe80::1"},
		},
		UserData:   []byte("#cloud-config\npackages:\n  - htop\nruncmd:\n  - nvidia-smi > /root/gpu.txt\n"),
		VendorData: []byte("#cloud-config\ntimezone: Etc/UTC\n"),
	}
}

func readInput(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "input", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type namedSpec struct {
	name string
	spec func(t testing.TB) *Spec
}

// goldenSpecs covers every rendered document and option.
func goldenSpecs() []namedSpec {
	return []namedSpec{
		{"minimal-nocloud", func(testing.TB) *Spec { return &Spec{Name: "vm1"} }},
		{"minimal-configdrive", func(testing.TB) *Spec { return &Spec{Name: "vm1", Format: FormatConfigDrive} }},
		{"typical-nocloud", func(testing.TB) *Spec { return typicalSpec() }},
		{"typical-configdrive", func(testing.TB) *Spec { s := typicalSpec(); s.Format = FormatConfigDrive; return s }},
		{"full-nocloud", func(testing.TB) *Spec { return fullSpec(FormatNoCloud) }},
		{"full-configdrive", func(testing.TB) *Spec { return fullSpec(FormatConfigDrive) }},
		{"dhcp-default-mac", func(testing.TB) *Spec {
			return &Spec{Name: "gpu-vm-1", Network: []NIC{{DHCP4: true}, {DHCP6: true}}}
		}},
		{"instance-id-override", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", InstanceID: "i-0123456789", Hostname: "web", QEMUGuestAgent: true}
		}},
		{"user-sudo-off", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", User: &User{Name: "ops", Sudo: ptr(""), Shell: "/bin/sh", LockPassword: ptr(false)}}
		}},
		{"userdata-only-cloud-config", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", UserData: []byte("#cloud-config\nruncmd: [echo only-user]\n")}
		}},
		{"userdata-only-cloudinit-config-b64", func(t testing.TB) *Spec {
			return &Spec{Name: "vm1", UserDataBase64: string(readInput(t, "cloudinit_config.b64"))}
		}},
		{"userdata-cloudinit-config-merged", func(t testing.TB) *Spec {
			s := typicalSpec()
			s.UserDataBase64 = string(readInput(t, "cloudinit_config.b64"))
			return s
		}},
		{"userdata-shell-merged", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", QEMUGuestAgent: true, UserData: []byte("#!/bin/bash\necho 'user script'\n")}
		}},
		{"userdata-binary-merged", func(t testing.TB) *Spec {
			// gzip is binary: the part goes base64-encoded.
			return &Spec{Name: "vm1", QEMUGuestAgent: true, UserData: gz(t, []byte("#!/bin/sh\necho from gzip\n"))}
		}},
		{"userdata-mime-single-merged", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", QEMUGuestAgent: true, UserData: []byte("Content-Type: text/x-shellscript\nMIME-Version: 1.0\n\n#!/bin/sh\necho single\n")}
		}},
		{"userdata-cloud-config-merged-configdrive", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", Format: FormatConfigDrive, User: &User{Name: "kohaku"}, UserData: []byte("#cloud-config\nruncmd:\n  - echo user-last\n")}
		}},
		{"raw-network-nocloud", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", NetworkConfig: []byte("version: 1\nconfig:\n  - type: physical\n    name: eth0\n    mac_address: '52:54:00:12:34:56'\n    subnets:\n      - type: dhcp\n")}
		}},
		{"raw-network-configdrive", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", Format: FormatConfigDrive, NetworkConfig: []byte(`{"links":[{"id":"a","type":"phy","ethernet_mac_address":"52:54:00:12:34:56"}],"networks":[{"id":"n","type":"ipv4_dhcp","link":"a","network_id":"n"}],"services":[]}` + "\n")}
		}},
		{"reporter-merged", func(testing.TB) *Spec {
			s := typicalSpec()
			s.PhoneHome = &PhoneHome{URL: "http://10.0.2.2:8787/v1/phone-home/AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd", Reporter: true, Token: "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"}
			s.UserData = []byte("#cloud-config\nruncmd:\n  - echo user-after-kohaku\n")
			return s
		}},
		{"reporter-channel", func(testing.TB) *Spec {
			s := typicalSpec()
			s.ReportChannel = true
			s.HeartbeatSeconds = 10
			return s
		}},
		{"vendor-data-nocloud", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", VendorData: []byte("#cloud-config\nntp:\n  enabled: true\n")}
		}},
	}
}

// requireTool finds an external tool. Without it the test fails when
// KOHAKU_REQUIRE_TOOLS=1 (as CI sets) and is skipped otherwise.
func requireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("KOHAKU_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s is required (KOHAKU_REQUIRE_TOOLS=1) but not on PATH: %v; install it with apt-get install -y --no-install-recommends %s", name, err, debPackage(name))
		}
		t.Skipf("%s not on PATH (apt-get install -y --no-install-recommends %s); set KOHAKU_REQUIRE_TOOLS=1 to make this a failure", name, debPackage(name))
	}
	return p
}

func debPackage(tool string) string {
	if strings.HasPrefix(tool, "cloud-init") {
		return "cloud-init"
	}
	return tool
}
