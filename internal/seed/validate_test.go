package seed

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// What users write in the wild passes: hashes as mkpasswd, openssl passwd
// and Python's crypt print them, zone names with their odd characters,
// locales with modifiers, RPM package names.
func TestSystemConveniencesAccepted(t *testing.T) {
	t.Parallel()
	s := &Spec{
		Name: "vm1",
		User: &User{Name: "kohaku", PasswordHash: "$y$j9T$F5Jx5fExrKuPp53xLKQ..1$X3DX6M94c7o.9agCG9G317fhZg9SqC.5i5rd.RhAtQ7"},
		Users: []User{
			{Name: "a", PasswordHash: "$6$rounds=4096$saltsalt$2qJGf0S3lVqO7Y9pC3cQ0eG1y7ZC9P5u0d3W5yJ0b8N2m1Yk7bqD0xZ3H9aX6vQ8rW4tE1uI2oP5aS7dF9gH0j."},
			{Name: "b", PasswordHash: "$5$saltsalt$Ph0ULkvJKc4b2t8G2xGgR1c9n1T2dTqCk3k0aTq2mM2"},
			{Name: "c", PasswordHash: "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW"},
		},
		Timezone: "America/Argentina/Buenos_Aires",
		Locale:   "de_DE.UTF-8@euro",
		Packages: []string{"NetworkManager", "python3.11", "g++", "nvidia-container-toolkit=1.17.8-1", "libfoo1=2:1.0~rc1+dfsg-1"},
	}
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	for _, tz := range []string{"UTC", "Etc/GMT+5", "Asia/Tokyo"} {
		if err := Validate(&Spec{Name: "vm1", Timezone: tz}); err != nil {
			t.Errorf("%s: %v", tz, err)
		}
	}
	for _, l := range []string{"C", "C.UTF-8", "POSIX", "ar_PS", "ja_JP.eucJP"} {
		if err := Validate(&Spec{Name: "vm1", Locale: l}); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
}

func TestValidationErrors(t *testing.T) {
	t.Parallel()
	nic := func(n NIC) func(*Spec) { return func(s *Spec) { s.Network = []NIC{n} } }
	cases := []struct {
		name    string
		mutate  func(*Spec)
		path    string
		problem string // substring of the problem
	}{
		{"name missing", func(s *Spec) { s.Name = "" }, "name", "is required"},
		{"name bad", func(s *Spec) { s.Name = "a b" }, "name", "has characters"},
		{"unknown format", func(s *Spec) { s.Format = "iso" }, "format", `unknown format "iso"`},
		{"instance id spaces", func(s *Spec) { s.InstanceID = "a b" }, "instance_id", "without spaces"},
		{"hostname bad", func(s *Spec) { s.Hostname = "under_score" }, "hostname", "not a valid host name"},
		{"fqdn no dot", func(s *Spec) { s.FQDN = "host" }, "fqdn", "not a fully qualified"},
		{"public key multi-line", func(s *Spec) { s.PublicKeys = []string{"ssh-rsa AAA\nssh-rsa BBB"} }, "public_keys[0]", "spans several lines"},
		{"meta key empty", func(s *Spec) { s.MetaData = map[string]string{"": "x"} }, `meta_data[""]`, "non-empty"},
		{"user name missing", func(s *Spec) { s.User = &User{} }, "user.name", "is required"},
		{"user root", func(s *Spec) { s.User = &User{Name: "root"} }, "user.name", "root_authorized_keys"},
		{"user name bad", func(s *Spec) { s.User = &User{Name: "Bob"} }, "user.name", "not a valid user name"},
		{"user shell", func(s *Spec) { s.User = &User{Name: "u", Shell: "bash"} }, "user.shell", "absolute path"},
		{"user sudo newline", func(s *Spec) { s.User = &User{Name: "u", Sudo: ptr("ALL\nALL")} }, "user.sudo", "one line"},
		{"user group", func(s *Spec) { s.User = &User{Name: "u", Groups: []string{"a b"}} }, "user.groups[0]", "group name"},
		{"user key", func(s *Spec) { s.User = &User{Name: "u", SSHAuthorizedKeys: []string{"ssh-ed25519 A", "nokey"}} }, "user.ssh_authorized_keys[1]", "OpenSSH"},
		{"root keys without user keys", func(s *Spec) { s.RootAuthorizedKeys = true }, "root_authorized_keys", "needs user.ssh_authorized_keys"},
		{"users name missing", func(s *Spec) { s.Users = []User{{Name: "a"}, {}} }, "users[1].name", "is required"},
		{"users root", func(s *Spec) { s.Users = []User{{Name: "root"}} }, "users[0].name", "root_authorized_keys"},
		{"users twice", func(s *Spec) { s.User = &User{Name: "kohaku"}; s.Users = []User{{Name: "kohaku"}} }, "users[0].name", "already declared by user"},
		{"users group", func(s *Spec) { s.Users = []User{{Name: "a", Groups: []string{"Wheel!"}}} }, "users[0].groups[0]", "group name"},
		{"users key", func(s *Spec) {
			s.Users = []User{{Name: "a", SSHAuthorizedKeys: []string{"-----BEGIN OPENSSH PRIVATE KEY-----"}}}
		}, "users[0].ssh_authorized_keys[0]", ""},
		{"plain password", func(s *Spec) { s.Users = []User{{Name: "a", PasswordHash: "hunter2"}} }, "users[0].password_hash", "not a crypt(3) hash"},
		{"unknown hash scheme", func(s *Spec) { s.User = &User{Name: "a", PasswordHash: "$9$abc$def"} }, "user.password_hash", "scheme"},
		{"hash with a colon", func(s *Spec) { s.User = &User{Name: "a", PasswordHash: "$6$salt$ab:cd"} }, "user.password_hash", "characters"},
		{"timezone unknown", func(s *Spec) { s.Timezone = "Mars/Olympus_Mons" }, "timezone", "tz database"},
		{"timezone Local", func(s *Spec) { s.Timezone = "Local" }, "timezone", "tz database"},
		{"timezone path", func(s *Spec) { s.Timezone = "/usr/share/zoneinfo/UTC" }, "timezone", "tz database"},
		{"locale", func(s *Spec) { s.Locale = "english" }, "locale", "not a locale name"},
		{"package spaces", func(s *Spec) { s.Packages = []string{"htop", "jq curl"} }, "packages[1]", "not a package name"},
		{"package option", func(s *Spec) { s.Packages = []string{"--allow-unauthenticated"} }, "packages[0]", "not a package name"},
		{"package twice", func(s *Spec) { s.Packages = []string{"jq", "jq=1.6"} }, "packages[1]", "already listed at packages[0]"},
		{"permit root without keys", func(s *Spec) { s.PermitRootLogin = true }, "permit_root_login", "needs root_authorized_keys"},
		{"file relative", func(s *Spec) { s.WriteFiles = []File{{Path: "etc/x"}} }, "write_files[0].path", "absolute file path"},
		{"file perms", func(s *Spec) { s.WriteFiles = []File{{Path: "/x", Permissions: "rw-r--r--"}} }, "write_files[0].permissions", "octal mode"},
		{"file owner", func(s *Spec) { s.WriteFiles = []File{{Path: "/x", Owner: "a:b:c"}} }, "write_files[0].owner", "user or user:group"},
		{"files too big", func(s *Spec) { s.WriteFiles = []File{{Path: "/x", Content: make([]byte, MaxWriteFilesBytes+1)}} }, "write_files", "MaxWriteFilesBytes"},
		{"mount type", func(s *Spec) { s.Mounts = []Mount{{Type: "nfs", Tag: "t", Path: "/m"}} }, "mounts[0].type", `unknown mount type "nfs"`},
		{"mount tag", func(s *Spec) { s.Mounts = []Mount{{Type: Mount9P, Tag: "a b", Path: "/m"}} }, "mounts[0].tag", "not a mount tag"},
		{"mount path", func(s *Spec) { s.Mounts = []Mount{{Type: Mount9P, Tag: "t", Path: "/my share"}} }, "mounts[0].path", "absolute mount point"},
		{"mount dup path", func(s *Spec) {
			s.Mounts = []Mount{{Type: Mount9P, Tag: "a", Path: "/m"}, {Type: MountVirtioFS, Tag: "b", Path: "/m"}}
		}, "mounts[1].path", "already the mount point of mounts[0]"},
		{"msize on virtiofs", func(s *Spec) { s.Mounts = []Mount{{Type: MountVirtioFS, Tag: "t", Path: "/m", MSize: 8192}} }, "mounts[0].msize", "only applies to 9p"},
		{"msize small", func(s *Spec) { s.Mounts = []Mount{{Type: Mount9P, Tag: "t", Path: "/m", MSize: 10}} }, "mounts[0].msize", "outside"},
		{"nvidia version", func(s *Spec) { s.NVIDIA = &NVIDIA{Version: "latest"} }, "nvidia.version", "not an NVIDIA driver version"},
		{"nvidia url scheme", func(s *Spec) { s.NVIDIA = &NVIDIA{Version: "550.54.14", URLTemplate: "ftp://x/{version}"} }, "nvidia.url_template", "https URL"},
		{"nvidia url http without sha256", func(s *Spec) { s.NVIDIA = &NVIDIA{Version: "550.54.14", URLTemplate: "http://x/{version}"} }, "nvidia.url_template", "plain http, and no sha256"},
		{"nvidia sha256", func(s *Spec) { s.NVIDIA = &NVIDIA{Version: "550.54.14", SHA256: "abc"} }, "nvidia.sha256", "64 hex digits"},
		{"nvidia url placeholder", func(s *Spec) { s.NVIDIA = &NVIDIA{Version: "550.54.14", URLTemplate: "https://x/driver.run"} }, "nvidia.url_template", "{version}"},
		{"nvidia url shell", func(s *Spec) { s.NVIDIA = &NVIDIA{Version: "550.54.14", URLTemplate: "https://x/{version}$(reboot)"} }, "nvidia.url_template", "shell metacharacters"},
		{"phone home url", func(s *Spec) { s.PhoneHome = &PhoneHome{URL: "10.0.2.2:8080"} }, "phone_home.url", "http(s) URL"},
		{"phone home tries", func(s *Spec) { s.PhoneHome = &PhoneHome{URL: "http://h/", Tries: -1} }, "phone_home.tries", "outside"},
		{"bad MAC", nic(NIC{MAC: "52:54:00:zz:00:01"}), "network[0].mac", "not a unicast Ethernet MAC"},
		{"short MAC", nic(NIC{MAC: "52:54:00:00:01"}), "network[0].mac", "six hex octets"},
		{"multicast MAC", nic(NIC{MAC: "01:00:5e:00:00:01"}), "network[0].mac", "multicast"},
		{"zero MAC", nic(NIC{MAC: "00:00:00:00:00:00"}), "network[0].mac", "all-zero"},
		{"duplicate MAC", func(s *Spec) {
			s.Network = []NIC{{MAC: "52:54:00:12:34:56"}, {MAC: "52-54-00-12-34-56"}}
		}, "network[1].mac", "52:54:00:12:34:56 is already the MAC of network[0]"},
		{"duplicate derived MAC", func(s *Spec) {
			s.Network = []NIC{{}, {MAC: DeriveMAC("vm1")}}
		}, "network[1].mac", "already the MAC of network[0]"},
		{"duplicate id", func(s *Spec) { s.Network = []NIC{{ID: "a"}, {ID: "a"}} }, "network[1].id", "already the id of network[0]"},
		{"set-name too long", nic(NIC{SetName: "averyveryverylongname"}), "network[0].set_name", "interface name"},
		{"address without prefix", nic(NIC{Addresses: []string{"10.0.2.15"}}), "network[0].addresses[0]", "no prefix length"},
		{"bad CIDR", nic(NIC{Addresses: []string{"10.0.2.15/24", "10.0.2.300/24"}}), "network[0].addresses[1]", "not an address in CIDR notation"},
		{"prefix 0", nic(NIC{Addresses: []string{"10.0.2.15/0"}}), "network[0].addresses[0]", "prefix length 0"},
		{"loopback", nic(NIC{Addresses: []string{"127.0.0.2/8"}}), "network[0].addresses[0]", "not a host address"},
		{"gateway outside", nic(NIC{Addresses: []string{"10.0.2.15/24"}, Gateway4: "10.0.3.1"}), "network[0].gateway4", "outside every IPv4 subnet of this NIC (10.0.2.0/24)"},
		{"gateway without address", nic(NIC{DHCP4: true, Gateway4: "10.0.3.1"}), "network[0].gateway4", "no static IPv4 address"},
		{"gateway wrong family", nic(NIC{Addresses: []string{"10.0.2.15/24"}, Gateway4: "2001:db8::1"}), "network[0].gateway4", "not an IPv4 address"},
		{"gateway is own address", nic(NIC{Addresses: []string{"10.0.2.15/24"}, Gateway4: "10.0.2.15"}), "network[0].gateway4", "own address"},
		{"gateway6 outside", nic(NIC{Addresses: []string{"10.0.2.15/24", "2001:db8::5/64"}, Gateway6: "2001:db9::1"}), "network[0].gateway6", "outside every IPv6 subnet"},
		{"gateway6 link-local needs v6 address", nic(NIC{Addresses: []string{"10.0.2.15/24"}, Gateway6: "fe80::1"}), "network[0].gateway6", "no static IPv6 address"},
		{"nameserver", nic(NIC{Nameservers: []string{"dns.google"}}), "network[0].nameservers[0]", "not an IP address"},
		{"search domain", nic(NIC{SearchDomains: []string{"exa mple.com"}}), "network[0].search_domains[0]", "not a domain name"},
		{"raw plus structured network", func(s *Spec) {
			s.Network = []NIC{{DHCP4: true}}
			s.NetworkConfig = []byte("version: 2\n")
		}, "network_config", "conflicts with network"},
		{"raw network bad YAML", func(s *Spec) { s.NetworkConfig = []byte("version: [2\n") }, "network_config", "not valid YAML"},
		{"raw network not a mapping", func(s *Spec) { s.NetworkConfig = []byte("- 1\n") }, "network_config", "must be a YAML mapping"},
		{"raw network_data.json bad", func(s *Spec) { s.Format = FormatConfigDrive; s.NetworkConfig = []byte("version: 2\n") }, "network_config", "not a network_data.json object"},
		{"raw network too big", func(s *Spec) { s.NetworkConfig = make([]byte, MaxNetworkConfigBytes+1) }, "network_config", "MaxNetworkConfigBytes"},
		{"user data twice", func(s *Spec) { s.UserData = []byte("#!/bin/sh\n"); s.UserDataBase64 = "IyEvYmluL3NoCg==" }, "user_data_base64", "conflicts with user_data"},
		{"user data bad base64", func(s *Spec) { s.UserDataBase64 = "not base64!" }, "user_data_base64", "not valid standard base64"},
		{"user data too big", func(s *Spec) { s.UserData = make([]byte, MaxUserDataBytes+1) }, "user_data", "MaxUserDataBytes"},
		{"user data gzip bomb", func(s *Spec) { s.UserData = gz(t, make([]byte, MaxUserDataBytes+1)) }, "user_data", "decompresses to more than"},
		{"user data broken gzip", func(s *Spec) { s.UserData = []byte{0x1f, 0x8b, 0, 0} }, "user_data", "does not decompress"},
		{"cloud-config bad YAML", func(s *Spec) { s.UserData = []byte("#cloud-config\nruncmd:\n  - ok\n bad: [\n") }, "user_data", "#cloud-config is not valid YAML at line 4"},
		{"cloud-config error after a multi-line flow list", func(s *Spec) { s.UserData = []byte("#cloud-config\nruncmd: [a,\n  b]\nx: y: z\n") }, "user_data", "not valid YAML at line 4"},
		{"cloud-config tab", func(s *Spec) { s.UserData = []byte("#cloud-config\nusers:\n\t- name: x\n") }, "user_data", "not valid YAML at line 3"},
		{"cloud-config not a mapping", func(s *Spec) { s.UserData = []byte("#cloud-config\n- runcmd\n") }, "user_data", "top level must be a mapping"},
		{"cloud-config bad YAML in base64 gzip", func(s *Spec) {
			s.UserDataBase64 = base64.StdEncoding.EncodeToString(gz(t, []byte("#cloud-config\na: b: c\n")))
		}, "user_data_base64", "not valid YAML at line 2"},
		{"MIME cloud-config part bad YAML", func(s *Spec) {
			s.UserData = []byte("Content-Type: multipart/mixed; boundary=\"b\"\nMIME-Version: 1.0\n\n--b\nContent-Type: text/x-shellscript\n\n#!/bin/sh\n--b\nContent-Type: text/cloud-config\n\n#cloud-config\nok: 1\nbad: [\n--b--\n")
		}, "user_data", "MIME part 2 (text/cloud-config) is not valid YAML at line 3 of the part"},
		{"MIME text/plain sniffed as cloud-config", func(s *Spec) {
			s.UserData = []byte("Content-Type: multipart/mixed; boundary=\"b\"\nMIME-Version: 1.0\n\n--b\nContent-Type: text/plain\nContent-Transfer-Encoding: base64\n\nI2Nsb3VkLWNvbmZpZwphOiBiOiBjCg==\n--b--\n")
		}, "user_data", "MIME part 1 (text/cloud-config)"},
		{"MIME without boundary", func(s *Spec) {
			s.UserData = []byte("Content-Type: multipart/mixed\nMIME-Version: 1.0\n\n--b\n")
		}, "user_data", "without a boundary"},
		{"MIME headers do not parse", func(s *Spec) {
			s.UserData = []byte("MIME-Version: 1.0\nno header separator")
		}, "user_data", "does not parse"},
		{"vendor data too big", func(s *Spec) { s.VendorData = make([]byte, MaxVendorDataBytes+1) }, "vendor_data", "MaxVendorDataBytes"},
		{"configdrive vendor data binary", func(s *Spec) { s.Format = FormatConfigDrive; s.VendorData = []byte{0xff} }, "vendor_data", "UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &Spec{Name: "vm1"}
			tc.mutate(s)
			err := Validate(s)
			if err == nil {
				t.Fatalf("Validate accepted the spec; want %s: %s", tc.path, tc.problem)
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("errors.Is(err, ErrInvalidSpec) is false for %v", err)
			}
			var found bool
			for _, ve := range ValidationErrors(err) {
				if ve.Path.String() == tc.path && strings.Contains(ve.Problem, tc.problem) {
					found = true
					if ve.Example == "" {
						t.Errorf("%s: no example of a right value", ve.Path)
					}
				}
			}
			if !found {
				t.Errorf("want an error at %s containing %q, got:\n%v", tc.path, tc.problem, err)
			}
			if _, rerr := Render(s); rerr == nil {
				t.Error("Render accepted a spec Validate rejects")
			}
		})
	}
}

func TestValidationErrorFormat(t *testing.T) {
	t.Parallel()
	err := Validate(&Spec{Name: "vm1", Network: []NIC{{Addresses: []string{"10.0.2.15/24", "10.0.2.300/24"}, Gateway4: "10.0.3.1"}}})
	ves := ValidationErrors(err)
	if len(ves) != 2 {
		t.Fatalf("want 2 errors (bad CIDR, gateway outside), got %d: %v", len(ves), err)
	}
	want := `network[0].gateway4: 10.0.3.1 is outside every IPv4 subnet of this NIC (10.0.2.0/24) (for example an address inside 10.0.2.0/24)`
	if got := ves[1].Error(); got != want {
		t.Errorf("Error() =\n%s\nwant\n%s", got, want)
	}
	if !strings.HasPrefix(ves[0].Error(), `network[0].addresses[1]: "10.0.2.300/24" is not an address in CIDR notation: `) ||
		!strings.HasSuffix(ves[0].Error(), `(for example "10.0.2.15/24" or "2001:db8::5/64")`) {
		t.Errorf("Error() = %s", ves[0].Error())
	}
	if ves[0].Unwrap() == nil {
		t.Error("the CIDR parse error is not wrapped")
	}
	if ValidationErrors(nil) != nil {
		t.Error("ValidationErrors(nil) should be empty")
	}
	if err := Validate(nil); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Validate(nil) = %v", err)
	}
}

func TestValidSpecsPass(t *testing.T) {
	t.Parallel()
	for _, s := range []*Spec{
		{Name: "vm1", Network: []NIC{{Addresses: []string{"2001:db8::5/64"}, Gateway6: "fe80::1"}}},
		{Name: "vm1", Network: []NIC{{Addresses: []string{"10.0.0.5/31"}, Gateway4: "10.0.0.4"}}},
		{Name: "vm1", Network: []NIC{{Addresses: []string{"10.0.2.15/24", "10.1.0.5/16"}, Gateway4: "10.1.0.1"}}},
		{Name: "vm_1"}, // not a host name: no local-hostname, still valid
		{Name: "vm1", UserDataBase64: "IyEvYmluL3NoCmVjaG8gaGkK\n"},
		{Name: "vm1", UserDataBase64: "IyEvYmluL3NoCmVjaG8gaGkK"[:22]}, // unpadded
		{Name: "vm1", UserData: []byte("#cloud-config\n")},
		{Name: "vm1", UserData: []byte("#cloud-config-archive\n- not: a mapping at the top\n")},
		{Name: "vm1", Format: FormatConfigDrive, NetworkConfig: []byte(`{"links":[]}`)},
	} {
		if err := Validate(s); err != nil {
			t.Errorf("Validate(%+v): %v", s, err)
		}
	}
}
