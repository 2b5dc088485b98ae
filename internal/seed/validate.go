package seed

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // time zone names are checked without the host's tz database
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

var (
	nameRe      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	labelRe     = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	userNameRe  = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	ownerRe     = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}(:[a-z_][a-z0-9_-]{0,31})?$`)
	permRe      = regexp.MustCompile(`^0?[0-7]{3,4}$`)
	nicIDRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	ifNameRe    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$`)
	mountTagRe  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,35}$`)
	guestPathRe = regexp.MustCompile(`^/[A-Za-z0-9_./@+-]*$`)
	nvidiaVerRe = regexp.MustCompile(`^[0-9]{2,4}(\.[0-9]{1,4}){1,2}$`)
	groupRe     = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// validHostname accepts a host name or dotted domain name of RFC 1123 labels.
func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !labelRe.MatchString(l) {
			return false
		}
	}
	return true
}

func singleLine(s string) bool { return s != "" && !strings.ContainsAny(s, "\r\n\x00") }

// Validate checks a Spec without rendering it. It returns nil or an error
// joining one *ValidationError per problem (see ValidationErrors).
func Validate(s *Spec) error {
	_, err := prepare(s)
	return err
}

func validateUser(s *Spec, p *problems) {
	u := s.User
	seen := map[string]string{}
	if u != nil {
		validateAccount(u, "user", p)
		if u.Name == "root" {
			p.add("user.name", `"root" cannot be the login user; use root_authorized_keys to give root the keys`, `"kohaku"`)
		}
		seen[u.Name] = "user"
	}
	for i, a := range s.Users {
		at := fmt.Sprintf("users[%d]", i)
		validateAccount(&a, at, p)
		switch {
		case a.Name == "root":
			p.add(at+".name", `"root" is not an account the seed creates; use user.root_authorized_keys to give root keys`, `"alice"`)
		case seen[a.Name] != "" && a.Name != "":
			p.add(at+".name", fmt.Sprintf("%q is already declared by %s: each account once", a.Name, seen[a.Name]), `"alice"`)
		}
		if a.Name != "" && seen[a.Name] == "" {
			seen[a.Name] = at
		}
	}
	if s.RootAuthorizedKeys && (u == nil || len(u.SSHAuthorizedKeys) == 0) {
		p.add("root_authorized_keys", "needs user.ssh_authorized_keys: root gets the login user's keys", `user = { name = "kohaku", ssh_authorized_keys = ["ssh-ed25519 AAAA..."] }`)
	}
	if s.PermitRootLogin && !s.RootAuthorizedKeys {
		p.add("permit_root_login", "needs root_authorized_keys = true: root login is key-only (PermitRootLogin prohibit-password)", "root_authorized_keys = true")
	}
}

// validateAccount checks one account of user or users, at its path.
func validateAccount(u *User, at string, p *problems) {
	switch {
	case u.Name == "":
		p.add(at+".name", "is required", `"kohaku"`)
	case u.Name != "root" && !userNameRe.MatchString(u.Name):
		p.add(at+".name", fmt.Sprintf("%q is not a valid user name (lower-case letters, digits, '_' and '-', at most 32, not starting with a digit or '-')", u.Name), `"kohaku"`)
	}
	if u.Sudo != nil && strings.ContainsAny(*u.Sudo, "\r\n\x00") {
		p.add(at+".sudo", "must be a single sudoers rule on one line", `"ALL=(ALL) NOPASSWD:ALL"`)
	}
	if u.Shell != "" && !guestPathRe.MatchString(u.Shell) {
		p.add(at+".shell", fmt.Sprintf("%q is not an absolute path", u.Shell), `"/bin/bash"`)
	}
	for i, g := range u.Groups {
		if !groupRe.MatchString(g) {
			p.add(fmt.Sprintf("%s.groups[%d]", at, i), fmt.Sprintf("%q is not a valid group name", g), `"docker"`)
		}
	}
	for i, k := range u.SSHAuthorizedKeys {
		if msg := sshKeyProblem(k); msg != "" {
			p.add(fmt.Sprintf("%s.ssh_authorized_keys[%d]", at, i), msg, `"ssh-ed25519 AAAAC3Nza... user@host"`)
		}
	}
	if u.PasswordHash != "" {
		if msg := passwordHashProblem(u.PasswordHash); msg != "" {
			p.add(at+".password_hash", msg, `"$6$rounds=4096$mysalt$..." (mkpasswd --method=SHA-512 --rounds=4096)`)
		}
	}
}

// cryptHashRe is a crypt(3) hash of a scheme a Linux guest's libcrypt
// verifies: MD5 ($1$), SHA-256 ($5$), SHA-512 ($6$), yescrypt ($y$),
// gost-yescrypt ($gy$), scrypt ($7$), bcrypt ($2a$/$2b$/$2y$).
var cryptHashRe = regexp.MustCompile(`^\$(1|5|6|y|gy|7|2[aby])\$[./A-Za-z0-9$=,]+$`)

// passwordHashProblem says what is wrong with a password hash, or "".
func passwordHashProblem(h string) string {
	switch {
	case !strings.HasPrefix(h, "$"):
		return "is not a crypt(3) hash (it does not start with $): a plain password would be refused by the guest's login or stored as is; give its hash instead"
	case !cryptHashRe.MatchString(h):
		return "is not a crypt(3) hash of a scheme Linux verifies ($6$ SHA-512, $5$ SHA-256, $y$ yescrypt, $2b$ bcrypt, ...), or holds characters a hash never has"
	}
	return ""
}

var (
	// localeRe: C, POSIX, or language[_TERRITORY][.codeset][@modifier].
	localeRe = regexp.MustCompile(`^(C|POSIX|[a-z]{2,3}(_[A-Z]{2})?)(\.[A-Za-z0-9-]+)?(@[A-Za-z]+)?$`)
	// packageRe: a package name (Debian's and RPM's characters) with an
	// optional =version.
	packageRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._-]*(=[A-Za-z0-9.+~:_-]+)?$`)
)

// validateSystem checks timezone, locale and packages.
func validateSystem(s *Spec, p *problems) {
	if tz := s.Timezone; tz != "" {
		if _, err := time.LoadLocation(tz); err != nil || tz == "Local" || strings.HasPrefix(tz, "/") {
			p.add("timezone", fmt.Sprintf("%q is not a time zone of the tz database", tz), `"Europe/Berlin" or "UTC"`)
		}
	}
	if s.Locale != "" && !localeRe.MatchString(s.Locale) {
		p.add("locale", fmt.Sprintf("%q is not a locale name (language_TERRITORY.codeset)", s.Locale), `"en_US.UTF-8"`)
	}
	if s.HeartbeatSeconds < 0 || s.HeartbeatSeconds > MaxHeartbeatSeconds {
		p.add("heartbeat_interval", fmt.Sprintf("%d is outside 0..%d seconds (0 turns the heartbeat off)", s.HeartbeatSeconds, MaxHeartbeatSeconds), "10")
	}
	seen := map[string]int{}
	for i, pkg := range s.Packages {
		at := fmt.Sprintf("packages[%d]", i)
		name, _, _ := strings.Cut(pkg, "=")
		switch {
		case !packageRe.MatchString(pkg):
			p.add(at, fmt.Sprintf("%q is not a package name, or name=version", pkg), `"htop" or "nvidia-container-toolkit=1.17.8-1"`)
		case seen[name] > 0:
			p.add(at, fmt.Sprintf("package %q is already listed at packages[%d]", name, seen[name]-1), `each package once`)
		}
		seen[name] = i + 1
	}
}

func validateFiles(s *Spec, p *problems) {
	total := 0
	for i, f := range s.WriteFiles {
		at := fmt.Sprintf("write_files[%d]", i)
		if !strings.HasPrefix(f.Path, "/") || !singleLine(f.Path) || strings.HasSuffix(f.Path, "/") || !utf8.ValidString(f.Path) {
			p.add(at+".path", fmt.Sprintf("%q is not an absolute file path", f.Path), `"/etc/kohaku/config.toml"`)
		}
		if f.Permissions != "" && !permRe.MatchString(f.Permissions) {
			p.add(at+".permissions", fmt.Sprintf("%q is not an octal mode", f.Permissions), `"0644"`)
		}
		if f.Owner != "" && !ownerRe.MatchString(f.Owner) {
			p.add(at+".owner", fmt.Sprintf("%q is not user or user:group", f.Owner), `"kohaku:kohaku"`)
		}
		total += len(f.Content)
	}
	if total > MaxWriteFilesBytes {
		p.add("write_files", fmt.Sprintf("contents add up to %d bytes, more than %d (MaxWriteFilesBytes)", total, MaxWriteFilesBytes), "put large files on a shared folder (mounts)")
	}
}

func validateMounts(s *Spec, p *problems) {
	seen := map[string]int{}
	for i, m := range s.Mounts {
		at := fmt.Sprintf("mounts[%d]", i)
		if m.Type != Mount9P && m.Type != MountVirtioFS {
			p.add(at+".type", fmt.Sprintf("unknown mount type %q", m.Type), `"9p" or "virtiofs"`)
		}
		if !mountTagRe.MatchString(m.Tag) {
			p.add(at+".tag", fmt.Sprintf("%q is not a mount tag (1-36 letters, digits, '_', '.', '-')", m.Tag), `"kohaku_shared"`)
		}
		if m.Path == "/" || !guestPathRe.MatchString(m.Path) {
			p.add(at+".path", fmt.Sprintf("%q is not an absolute mount point without spaces or quotes", m.Path), `"/shared"`)
		} else if j, dup := seen[m.Path]; dup {
			p.add(at+".path", fmt.Sprintf("%q is already the mount point of mounts[%d]", m.Path, j), `"/shared2"`)
		} else {
			seen[m.Path] = i
		}
		if m.MSize != 0 {
			if m.Type != Mount9P {
				p.add(at+".msize", "only applies to 9p mounts", "leave msize unset for virtiofs")
			} else if m.MSize < 4096 || m.MSize > 1<<26 {
				p.add(at+".msize", fmt.Sprintf("%d is outside 4096..67108864", m.MSize), "524288")
			}
		}
	}
}

func validateNVIDIA(s *Spec, p *problems) {
	n := s.NVIDIA
	if n == nil {
		return
	}
	if !nvidiaVerRe.MatchString(n.Version) {
		p.add("nvidia.version", fmt.Sprintf("%q is not an NVIDIA driver version", n.Version), `"550.54.14"`)
	}
	if n.URLTemplate != "" {
		u, err := url.Parse(n.URLTemplate)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			p.add("nvidia.url_template", fmt.Sprintf("%q is not an https URL", n.URLTemplate), `"https://mirror.example/nvidia/{version}/NVIDIA-Linux-x86_64-{version}.run"`)
		case u.Scheme == "http" && n.SHA256 == "":
			p.add("nvidia.url_template", fmt.Sprintf("%q is plain http, and no sha256 pins what the guest would run: anyone on the path could replace the installer; use https, or give nvidia.sha256 (the guest checks the download against it before running it)", n.URLTemplate), `"https://mirror.example/nvidia/{version}/NVIDIA-Linux-x86_64-{version}.run"`)
		case !strings.Contains(n.URLTemplate, "{version}"):
			p.add("nvidia.url_template", "has no {version} placeholder", `"https://mirror.example/nvidia/{version}/NVIDIA-Linux-x86_64-{version}.run"`)
		case strings.ContainsAny(n.URLTemplate, "'\"` \\\n\r\t$;&|<>"):
			p.add("nvidia.url_template", "contains shell metacharacters or spaces", `"https://mirror.example/nvidia/{version}/NVIDIA-Linux-x86_64-{version}.run"`)
		}
	}
	if n.SHA256 != "" && !sha256HexRe.MatchString(n.SHA256) {
		p.add("nvidia.sha256", "is not 64 hex digits", `"`+strings.Repeat("0", 64)+`"`)
	}
}

// sha256HexRe matches a SHA-256 in hex.
var sha256HexRe = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

func validatePhoneHome(s *Spec, p *problems) {
	ph := s.PhoneHome
	if ph == nil {
		return
	}
	u, err := url.Parse(ph.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !singleLine(ph.URL) {
		p.add("phone_home.url", fmt.Sprintf("%q is not an http(s) URL", ph.URL), `"http://10.0.2.2:8080/phone-home/$INSTANCE_ID"`)
	}
	if ph.Tries < 0 || ph.Tries > 1000 {
		p.add("phone_home.tries", fmt.Sprintf("%d is outside 0..1000 (0 means %d)", ph.Tries, DefaultPhoneHomeTries), "10")
	}
}

func validateNetwork(s *Spec, format Format, p *problems) []nicPlan {
	if len(s.Network) > 0 && len(s.NetworkConfig) > 0 {
		p.add("network_config", "conflicts with network: give either the structured network or a raw network_config", `network = [{ dhcp4 = true }]`)
		return nil
	}
	if len(s.NetworkConfig) > 0 {
		validateRawNetwork(s.NetworkConfig, format, p)
		return nil
	}
	var out []nicPlan
	macs := map[string]int{}
	ids := map[string]int{}
	for i, n := range s.Network {
		at := fmt.Sprintf("network[%d]", i)
		np := nicPlan{id: n.ID, setName: n.SetName, dhcp4: n.DHCP4, dhcp6: n.DHCP6, search: n.SearchDomains}
		if np.id == "" {
			np.id = fmt.Sprintf("nic%d", i)
		} else if !nicIDRe.MatchString(np.id) {
			p.add(at+".id", fmt.Sprintf("%q is not an interface id (letters, digits, '_', '.', '-')", n.ID), `"lan0"`)
		}
		if j, dup := ids[np.id]; dup {
			p.add(at+".id", fmt.Sprintf("%q is already the id of network[%d]", np.id, j), fmt.Sprintf(`"nic%d"`, i))
		}
		ids[np.id] = i

		if n.MAC == "" {
			np.mac = DefaultMAC(s.Name, i)
		} else if m, err := normalizeMAC(n.MAC); err != nil {
			p.addErr(at+".mac", fmt.Sprintf("%q is not a unicast Ethernet MAC: %v", n.MAC, err), `"52:54:00:12:34:56"`, err)
		} else {
			np.mac = m
		}
		if np.mac != "" {
			if j, dup := macs[np.mac]; dup {
				p.add(at+".mac", fmt.Sprintf("%s is already the MAC of network[%d]", np.mac, j), "give every NIC its own MAC, or leave mac empty to derive one")
			}
			macs[np.mac] = i
		}
		if n.SetName != "" && !ifNameRe.MatchString(n.SetName) {
			p.add(at+".set_name", fmt.Sprintf("%q is not an interface name (at most 15 of letters, digits, '_', '.', '-')", n.SetName), `"eth0"`)
		}

		for j, a := range n.Addresses {
			pre, err := netip.ParsePrefix(a)
			switch {
			case err != nil && !strings.Contains(a, "/"):
				p.add(fmt.Sprintf("%s.addresses[%d]", at, j), fmt.Sprintf("%q has no prefix length", a), `"10.0.2.15/24" or "2001:db8::5/64"`)
			case err != nil:
				p.addErr(fmt.Sprintf("%s.addresses[%d]", at, j), fmt.Sprintf("%q is not an address in CIDR notation: %v", a, err), `"10.0.2.15/24" or "2001:db8::5/64"`, err)
			case pre.Addr().Zone() != "" || pre.Addr().Is4In6():
				p.add(fmt.Sprintf("%s.addresses[%d]", at, j), fmt.Sprintf("%q must be a plain IPv4 or IPv6 address", a), `"10.0.2.15/24"`)
			case pre.Bits() == 0:
				p.add(fmt.Sprintf("%s.addresses[%d]", at, j), fmt.Sprintf("%q has prefix length 0", a), `"10.0.2.15/24"`)
			case pre.Addr().IsUnspecified() || pre.Addr().IsMulticast() || pre.Addr().IsLoopback():
				p.add(fmt.Sprintf("%s.addresses[%d]", at, j), fmt.Sprintf("%q is not a host address", a), `"10.0.2.15/24"`)
			default:
				np.addrs = append(np.addrs, pre)
			}
		}
		np.gw4 = checkGateway(n.Gateway4, false, np.addrs, at+".gateway4", p)
		np.gw6 = checkGateway(n.Gateway6, true, np.addrs, at+".gateway6", p)

		for j, ns := range n.Nameservers {
			a, err := netip.ParseAddr(ns)
			if err != nil || a.Zone() != "" {
				p.add(fmt.Sprintf("%s.nameservers[%d]", at, j), fmt.Sprintf("%q is not an IP address", ns), `"10.0.2.3"`)
				continue
			}
			np.nameservers = append(np.nameservers, a)
		}
		for j, d := range n.SearchDomains {
			if !validHostname(strings.TrimSuffix(d, ".")) {
				p.add(fmt.Sprintf("%s.search_domains[%d]", at, j), fmt.Sprintf("%q is not a domain name", d), `"example.com"`)
			}
		}
		out = append(out, np)
	}
	return out
}

func checkGateway(gw string, v6 bool, addrs []netip.Prefix, at string, p *problems) netip.Addr {
	if gw == "" {
		return netip.Addr{}
	}
	fam, example := "IPv4", `"10.0.2.2"`
	if v6 {
		fam, example = "IPv6", `"2001:db8::1" or "fe80::1"`
	}
	a, err := netip.ParseAddr(gw)
	if err != nil || a.Zone() != "" || a.Is6() != v6 || a.Is4In6() {
		p.add(at, fmt.Sprintf("%q is not an %s address", gw, fam), example)
		return netip.Addr{}
	}
	var subnets []string
	for _, pre := range addrs {
		if pre.Addr().Is6() != v6 {
			continue
		}
		if v6 && a.IsLinkLocalUnicast() {
			// IPv6 routers are usually reached by their link-local
			// address; cloud-init still needs a static address to hang
			// the gateway on.
			return a
		}
		if pre.Masked().Contains(a) {
			if a == pre.Addr() {
				p.add(at, fmt.Sprintf("%s is this NIC's own address", gw), example)
				return netip.Addr{}
			}
			return a
		}
		subnets = append(subnets, pre.Masked().String())
	}
	if len(subnets) == 0 {
		p.add(at, fmt.Sprintf("%s is outside every subnet of this NIC: it has no static %s address", gw, fam), fmt.Sprintf("addresses = "+
			"[\"10.0.2.15/24\"] with %s = \"10.0.2.2\"", at[strings.LastIndex(at, ".")+1:]))
	} else {
		p.add(at, fmt.Sprintf("%s is outside every %s subnet of this NIC (%s)", gw, fam, strings.Join(subnets, ", ")), "an address inside "+subnets[0])
	}
	return netip.Addr{}
}

func validateRawNetwork(b []byte, format Format, p *problems) {
	if len(b) > MaxNetworkConfigBytes {
		p.add("network_config", fmt.Sprintf("is %d bytes, more than %d (MaxNetworkConfigBytes)", len(b), MaxNetworkConfigBytes), "version: 2\\nethernets: {...}")
		return
	}
	if format == FormatConfigDrive {
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			p.addErr("network_config", "is not a network_data.json object (ConfigDrive takes network_data.json): "+err.Error(), `{"links": [...], "networks": [...], "services": [...]}`, err)
		}
		return
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		p.addErr("network_config", "is not valid YAML: "+strings.TrimPrefix(err.Error(), "yaml: "), "version: 2\\nethernets:\\n  nic0:\\n    dhcp4: true", err)
		return
	}
	if len(n.Content) == 0 || n.Content[0].Kind != yaml.MappingNode {
		p.add("network_config", "must be a YAML mapping with a version key", "version: 2\\nethernets:\\n  nic0:\\n    dhcp4: true")
	}
}
