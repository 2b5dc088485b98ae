package seed

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// PhoneHomePost is what the phone_home module posts, in this order.
var PhoneHomePost = []string{"instance_id", "hostname", "fqdn", "pub_key_rsa", "pub_key_ecdsa", "pub_key_ed25519"}

// NVIDIAPackages are installed through cloud-init's packages module before
// the driver is built (the kernel headers are installed from runcmd, since
// their name depends on the running kernel).
var NVIDIAPackages = []string{"build-essential", "dkms", "curl"}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// mountFstabLine is the /etc/fstab line for a mount.
func mountFstabLine(m Mount) string {
	var opts []string
	fstype := string(m.Type)
	if m.Type == Mount9P {
		msize := m.MSize
		if msize == 0 {
			msize = Default9PMSize
		}
		opts = append(opts, "trans=virtio", "version=9p2000.L", "msize="+strconv.Itoa(msize))
	} else {
		opts = append(opts, "defaults")
	}
	if m.ReadOnly {
		opts = append(opts, "ro")
	}
	// nofail: a share the host no longer exports must not stop the boot.
	opts = append(opts, "nofail")
	return fmt.Sprintf("%s %s %s %s 0 0", m.Tag, m.Path, fstype, strings.Join(opts, ","))
}

// mountCommands are the bootcmd lines that load the modules, create the
// mount points, add the fstab lines (with nofail) and mount the shares.
// bootcmd runs on every boot in cloud-init's network stage, before
// write_files, users, scripts-user (the user's shell-script parts and
// boothook-less scripts) and runcmd, so every piece of user code finds the
// shares mounted; on later boots fstab mounts them too. The lines are
// idempotent since they run on every boot.
//
// cloud-init's own mounts: module is not used for shares: it only keeps
// entries whose first field is a block device it can find under /sys/block
// or contains a ':' (cc_mounts sanitize_devname), so a 9p or virtiofs tag
// is dropped with "Ignoring nonexistent named mount" (22.4 and 25.1 alike).
func mountCommands(mounts []Mount) []string {
	var cmds []string
	has9p, hasVFS := false, false
	for _, m := range mounts {
		has9p = has9p || m.Type == Mount9P
		hasVFS = hasVFS || m.Type == MountVirtioFS
	}
	if has9p {
		cmds = append(cmds, "modprobe -a 9p 9pnet 9pnet_virtio || true")
	}
	if hasVFS {
		cmds = append(cmds, "modprobe virtiofs || true")
	}
	for _, m := range mounts {
		line := mountFstabLine(m)
		// Tags, paths and options are validated to need no shell quoting
		// (letters, digits and _ . / @ + - only).
		cmds = append(cmds,
			"mkdir -p "+m.Path,
			fmt.Sprintf(`grep -qxF "%s" /etc/fstab || echo "%s" >> /etc/fstab`, line, line),
			fmt.Sprintf("mountpoint -q %s || mount %s || true", m.Path, m.Path),
		)
	}
	return cmds
}

// resolvConfCommands are the bootcmd lines that put the declared DNS
// servers and search domains into /etc/resolv.conf on guests where nothing
// else would: cloud-init hands them to the renderer, and only resolvconf
// reads ENI's dns-nameservers/dns-search while only systemd-resolved reads
// netplan's and networkd's. A symlinked resolv.conf (systemd-resolved,
// resolvconf) or an installed resolvconf is left alone. Name servers
// already in the file (e.g. from a DHCP NIC) are kept after the declared
// ones.
func resolvConfCommands(nics []nicPlan) []string {
	var ns, search []string
	seen := map[string]bool{}
	for _, n := range nics {
		for _, a := range n.nameservers {
			if !seen[a.String()] {
				seen[a.String()] = true
				ns = append(ns, a.String())
			}
		}
		for _, d := range n.search {
			if !seen["search "+d] {
				seen["search "+d] = true
				search = append(search, d)
			}
		}
	}
	if len(ns) == 0 && len(search) == 0 {
		return nil
	}
	// Addresses and domain names are validated: no shell quoting needed.
	var b strings.Builder
	b.WriteString("if [ ! -L /etc/resolv.conf ] && ! command -v resolvconf >/dev/null 2>&1; then { echo '# written by kohaku from the seed (no resolvconf or systemd-resolved)';")
	for _, a := range ns {
		b.WriteString(" echo 'nameserver " + a + "';")
	}
	if len(search) > 0 {
		b.WriteString(" echo 'search " + strings.Join(search, " ") + "';")
	}
	b.WriteString(" grep -s '^nameserver' /etc/resolv.conf")
	for _, a := range ns {
		b.WriteString(" | grep -vx 'nameserver " + a + "'")
	}
	b.WriteString("; } > /etc/resolv.conf.kohaku; mv /etc/resolv.conf.kohaku /etc/resolv.conf; fi")
	return []string{b.String()}
}

// nvidiaCommands installs the kernel headers, then downloads and runs the
// NVIDIA installer with DKMS so the module survives kernel updates. The
// download is https only, redirects included (curl --proto and
// --proto-redir), unless the URL is plain http, which validation allows
// only with a SHA-256; it goes to a private file from mktemp (not a fixed
// path another user of the guest could plant), and is checked against the
// SHA-256 when one is given, before it runs.
func nvidiaCommands(n *NVIDIA) []string {
	tmpl := n.URLTemplate
	if tmpl == "" {
		tmpl = DefaultNVIDIAURL
	}
	u := strings.ReplaceAll(tmpl, "{version}", n.Version)
	proto := "=https"
	if strings.HasPrefix(u, "http://") {
		proto = "=http,https" // allowed only with a SHA-256, checked below
	}
	check := ""
	if n.SHA256 != "" {
		check = ` echo "` + strings.ToLower(n.SHA256) + `  $f" | sha256sum -c -;`
	}
	return []string{
		`DEBIAN_FRONTEND=noninteractive apt-get install -y "linux-headers-$(uname -r)" || DEBIAN_FRONTEND=noninteractive apt-get install -y linux-headers-amd64`,
		`( set -e; f=$(mktemp); trap 'rm -f "$f"' EXIT;` +
			` curl -fsSL --proto ` + proto + ` --proto-redir ` + proto + ` --retry 3 -o "$f" ` + shQuote(u) + `;` + check +
			` chmod 700 "$f"; "$f" --silent --dkms --no-cc-version-check )`,
	}
}

// textContent reports whether b can be written as a YAML text scalar.
func textContent(b []byte) bool {
	return utf8.Valid(b) && printableText(string(b))
}

// renderCloudConfig returns the generated "#cloud-config" document, or nil
// when the Spec asks for nothing that needs one.
func renderCloudConfig(pl *plan) ([]byte, error) {
	s := pl.spec
	m := newMap()

	if s.FQDN != "" {
		host := pl.hostname
		if host == "" {
			host = s.FQDN[:strings.Index(s.FQDN, ".")]
		}
		m.set("hostname", ystr(host))
		m.set("fqdn", ystr(s.FQDN))
	}
	if s.RootAuthorizedKeys {
		// Otherwise cloud-init prefixes root's keys from meta-data with a
		// "Please login as the user ..." command.
		m.set("disable_root", ybool(false))
	}

	if s.User != nil || len(s.Users) > 0 {
		// "default" keeps the image's default user (which gets public_keys).
		users := yseq(ystr("default"))
		if u := s.User; u != nil {
			users.Content = append(users.Content, accountNode(u, DefaultSudo))
			if s.RootAuthorizedKeys {
				users.Content = append(users.Content, newMap().
					set("name", ystr("root")).
					set("ssh_authorized_keys", ystrs(u.SSHAuthorizedKeys)).node())
			}
		}
		for i := range s.Users {
			users.Content = append(users.Content, accountNode(&s.Users[i], ""))
		}
		m.set("users", users)
	}
	if s.SSHPasswordAuth != nil {
		m.set("ssh_pwauth", ybool(*s.SSHPasswordAuth))
	}
	if s.Timezone != "" {
		m.set("timezone", ystr(s.Timezone))
	}
	if s.Locale != "" {
		m.set("locale", ystr(s.Locale))
	}

	files := writeFiles(pl)
	if len(files.Content) > 0 {
		m.set("write_files", files)
	}

	if pk := packageList(s); len(pk.Content) > 0 {
		m.set("packages", pk)
	}
	if s.PackageUpdate {
		m.set("package_update", ybool(true))
	}
	if s.PackageUpgrade {
		m.set("package_upgrade", ybool(true))
	}

	boot := append(mountCommands(s.Mounts), resolvConfCommands(pl.nics)...)
	if len(boot) > 0 {
		m.set("bootcmd", ystrs(boot))
	}

	if run := runCommands(s); len(run) > 0 {
		m.set("runcmd", ystrs(run))
	}

	if ph := s.PhoneHome; ph != nil && !ph.Reporter {
		tries := ph.Tries
		if tries == 0 {
			tries = DefaultPhoneHomeTries
		}
		m.set("phone_home", newMap().
			set("url", ystr(ph.URL)).
			set("post", ystrs(PhoneHomePost)).
			set("tries", yint(tries)).node())
	}

	if m.empty() {
		return nil, nil
	}
	body, err := encodeYAML(m.node())
	if err != nil {
		return nil, fmt.Errorf("encoding cloud-config: %w", err)
	}
	return append([]byte("#cloud-config\n"), body...), nil
}

// writeFiles is the write_files list: the Spec's files, then the
// reporter's and the sshd drop-in that lets root log in with a key.
func writeFiles(pl *plan) *yaml.Node {
	s := pl.spec
	files := yseq()
	loginUser := ""
	if s.User != nil {
		loginUser = s.User.Name
	}
	for _, f := range s.WriteFiles {
		fm := newMap().set("path", ystr(f.Path))
		if textContent(f.Content) {
			fm.set("content", ystr(string(f.Content)))
		} else {
			fm.set("encoding", ystr("b64"))
			fm.set("content", ystr(base64.StdEncoding.EncodeToString(f.Content)))
		}
		if f.Owner != "" {
			fm.set("owner", ystr(f.Owner))
		}
		if f.Permissions != "" {
			perm := f.Permissions
			if len(perm) == 3 {
				perm = "0" + perm
			}
			fm.set("permissions", ystr(perm))
		}
		if f.Append {
			fm.set("append", ybool(true))
		}
		owner, _, _ := strings.Cut(f.Owner, ":")
		if f.Defer || (loginUser != "" && owner == loginUser) {
			// write_files runs before users exist unless deferred.
			fm.set("defer", ybool(true))
		}
		files.Content = append(files.Content, fm.node())
	}
	if rep := s.reporter(); rep != nil {
		for _, f := range reporterFiles(rep, expectation(pl)) {
			fm := newMap().set("path", ystr(f.Path))
			if f.Path == ReporterScriptPath {
				fm.set("encoding", ystr("gz+b64"))
				fm.set("content", ystr(reporterScriptGzB64))
			} else {
				fm.set("content", ystr(string(f.Content)))
			}
			files.Content = append(files.Content, fm.set("permissions", ystr(f.Permissions)).node())
		}
	}
	if s.PermitRootLogin {
		files.Content = append(files.Content, newMap().
			set("path", ystr(RootSSHDDropInPath)).
			set("content", ystr("# Written by kohaku: root may log in with a key, never a password.\nPermitRootLogin prohibit-password\n")).
			set("permissions", ystr("0644")).node())
	}
	return files
}

// runCommands is the runcmd list: the guest agent, sshd's reload for root,
// the NVIDIA driver, then the reporter.
func runCommands(s *Spec) []string {
	var run []string
	if s.QEMUGuestAgent {
		run = append(run, QEMUGuestAgentCommands...)
	}
	if s.PermitRootLogin {
		run = append(run, "systemctl reload ssh || systemctl reload sshd || true")
	}
	if s.NVIDIA != nil {
		run = append(run, nvidiaCommands(s.NVIDIA)...)
	}
	if s.reporter() != nil {
		run = append(run, ReporterCommands...)
	}
	return run
}

// accountNode is one cloud-init users entry; defaultSudo applies when the
// account says nothing about sudo.
func accountNode(u *User, defaultSudo string) *yaml.Node {
	um := newMap().set("name", ystr(u.Name))
	sudo := defaultSudo
	if u.Sudo != nil {
		sudo = *u.Sudo
	}
	if sudo != "" {
		um.set("sudo", ystr(sudo))
	}
	shell := u.Shell
	if shell == "" {
		shell = DefaultShell
	}
	um.set("shell", ystr(shell))
	lock := u.PasswordHash == ""
	if u.LockPassword != nil {
		lock = *u.LockPassword
	}
	um.set("lock_passwd", ybool(lock))
	if u.PasswordHash != "" {
		// hashed_passwd, not passwd: applied to an account the image
		// already has too.
		um.set("hashed_passwd", ystr(u.PasswordHash))
	}
	if len(u.Groups) > 0 {
		um.set("groups", ystrs(u.Groups))
	}
	if len(u.SSHAuthorizedKeys) > 0 {
		um.set("ssh_authorized_keys", ystrs(u.SSHAuthorizedKeys))
	}
	return um.node()
}

// packageList is cloud-init's packages: the NVIDIA driver's build tools
// first, then the spec's, each once; "name=version" becomes the
// [name, version] pair cloud-init installs a version from.
func packageList(s *Spec) *yaml.Node {
	out := yseq()
	seen := map[string]bool{}
	add := func(p string) {
		name, version, pinned := strings.Cut(p, "=")
		if seen[name] {
			return
		}
		seen[name] = true
		if pinned {
			out.Content = append(out.Content, ystrs([]string{name, version}))
			return
		}
		out.Content = append(out.Content, ystr(name))
	}
	if s.NVIDIA != nil {
		for _, p := range NVIDIAPackages {
			add(p)
		}
	}
	for _, p := range s.Packages {
		add(p)
	}
	return out
}
