package seed

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Real cloud-init judges the output without booting a guest: its schema
// validator, its network converter and its own user-data processing and
// merging code.
//
// The cloud-init on PATH (Debian 12: 22.4) is always used. More versions
// come from KOHAKU_CLOUD_INIT_ROOTS, a colon-separated list of directories
// holding an unpacked cloud-init .deb: the GNUmakefile sets it to Debian 13's
// 25.1 as internal/acctest/cloudinit/fetch.sh unpacks it (`make tools`).

type cloudInit struct {
	name   string   // for subtest names
	python string   // interpreter with the cloudinit package importable
	cmd    []string // argv prefix of the cloud-init CLI
	env    []string
}

func (c cloudInit) run(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	argv := append(append([]string{}, c.cmd...), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), c.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return append(stdout.Bytes(), stderr.Bytes()...), err
	}
	return stdout.Bytes(), nil
}

func (c cloudInit) script(t testing.TB, script string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(c.python, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return append(stdout.Bytes(), stderr.Bytes()...), err
	}
	return stdout.Bytes(), nil
}

// cloudInits returns the cloud-init installations to judge with.
func cloudInits(t testing.TB) []cloudInit {
	t.Helper()
	bin := requireTool(t, "cloud-init")
	python := "/usr/bin/python3"
	if f, err := os.Open(bin); err == nil {
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		if strings.HasPrefix(line, "#!") {
			python = strings.Fields(strings.TrimPrefix(line, "#!"))[0]
		}
	}
	out := []cloudInit{{name: "path", python: python, cmd: []string{bin}}}
	for _, root := range filepath.SplitList(os.Getenv("KOHAKU_CLOUD_INIT_ROOTS")) {
		if root == "" {
			continue
		}
		pkg := filepath.Join(root, "usr", "lib", "python3", "dist-packages")
		if _, err := os.Stat(filepath.Join(pkg, "cloudinit")); err != nil {
			t.Fatalf("KOHAKU_CLOUD_INIT_ROOTS entry %s has no usr/lib/python3/dist-packages/cloudinit: %v", root, err)
		}
		out = append(out, cloudInit{
			name:   filepath.Base(root),
			python: python,
			cmd:    []string{python, filepath.Join(root, "usr", "bin", "cloud-init")},
			env:    []string{"PYTHONPATH=" + pkg},
		})
	}
	for i := range out {
		v, err := out[i].run(t, "--version")
		if err != nil {
			t.Fatalf("%v --version: %v\n%s", out[i].cmd, err, v)
		}
		t.Logf("judge %s: %s", out[i].name, strings.TrimSpace(string(v)))
	}
	return out
}

// mergeResult is what testdata/ci_merge.py prints.
type mergeResult struct {
	Version string         `json:"version"`
	Merged  map[string]any `json:"merged"`
	Parts   []string       // content types, in order
	Payload [][]byte       // decoded payloads, in order
}

// ciMerge runs cloud-init's own user-data processing and cloud-config
// merging over a user-data document.
func ciMerge(t testing.TB, ci cloudInit, userData []byte) mergeResult {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "user-data")
	if err := os.WriteFile(src, userData, 0o644); err != nil {
		t.Fatal(err)
	}
	parts := filepath.Join(dir, "parts")
	if err := os.Mkdir(parts, 0o755); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs(filepath.Join("testdata", "ci_merge.py"))
	out, err := ci.script(t, script, src, parts)
	if err != nil {
		t.Fatalf("ci_merge.py: %v\n%s", err, out)
	}
	var r mergeResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("ci_merge.py output: %v\n%s", err, out)
	}
	listing, err := os.ReadFile(filepath.Join(parts, "parts.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for i, ct := range strings.Fields(string(listing)) {
		r.Parts = append(r.Parts, ct)
		b, err := os.ReadFile(filepath.Join(parts, "part-"+pad3(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		r.Payload = append(r.Payload, b)
	}
	return r
}

func pad3(i int) string { return fmt.Sprintf("%03d", i) }

func itoa(i int) string { return strconv.Itoa(i) }

func userDataOf(r *Result) []byte {
	if r.Format == FormatConfigDrive {
		return r.Files[FileCDUserData]
	}
	return r.Files[FileUserData]
}

// TestCloudInitSchema validates every cloud-config document the seeds
// carry (each text/cloud-config part of a MIME document on its own, since
// `cloud-init schema` only takes a #cloud-config file).
func TestCloudInitSchema(t *testing.T) {
	t.Parallel()
	judges := cloudInits(t)
	for _, ci := range judges {
		for _, tc := range goldenSpecs() {
			t.Run(ci.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				r, err := Render(tc.spec(t))
				if err != nil {
					t.Fatal(err)
				}
				docs := map[string][]byte{}
				if ud := userDataOf(r); len(ud) > 0 {
					m := ciMerge(t, ci, ud)
					for i, ct := range m.Parts {
						if ct == "text/cloud-config" {
							docs["user-data part "+itoa(i+1)] = m.Payload[i]
						}
					}
				}
				if vd := r.Files[FileVendorData]; bytes.HasPrefix(vd, []byte("#cloud-config")) {
					docs["vendor-data"] = vd
				}
				for name, doc := range docs {
					p := filepath.Join(t.TempDir(), "cloud-config.yaml")
					if err := os.WriteFile(p, doc, 0o644); err != nil {
						t.Fatal(err)
					}
					out, err := ci.run(t, "schema", "--config-file", p)
					if err != nil || !bytes.Contains(out, []byte("Valid")) {
						t.Errorf("cloud-init schema rejected %s: %v\n%s\n--- document\n%s", name, err, out, doc)
					}
				}
			})
		}
	}
}

// TestCloudInitMerge runs cloud-init's user-data processing over merged
// documents: the user's parts keep their bytes and content types, and the
// generated cloud-config merges in the way the package documents.
func TestCloudInitMerge(t *testing.T) {
	t.Parallel()
	judges := cloudInits(t)
	hashicorp := func(t testing.TB) []byte {
		s := typicalSpec()
		s.UserDataBase64 = string(readInput(t, "cloudinit_config.b64"))
		r, err := Render(s)
		if err != nil {
			t.Fatal(err)
		}
		return userDataOf(r)
	}
	for _, ci := range judges {
		t.Run(ci.name+"/cloudinit_config-flattened", func(t *testing.T) {
			t.Parallel()
			m := ciMerge(t, ci, hashicorp(t))
			want := []string{"text/cloud-config", "text/x-shellscript", "text/cloud-config"}
			if strings.Join(m.Parts, ",") != strings.Join(want, ",") {
				t.Fatalf("parts %v, want %v (flattened, not nested)", m.Parts, want)
			}
			if !bytes.Equal(m.Payload[1], []byte("#!/bin/sh\necho from-terraform-script > /run/tf-script\n")) {
				t.Errorf("user's script part changed: %q", m.Payload[1])
			}
			run := toStrings(m.Merged["runcmd"])
			if len(run) == 0 || run[len(run)-1] != "echo from-terraform-cloud-config" {
				t.Errorf("runcmd: generated commands must come first and the user's last, got %q", run)
			}
			// Shares are mounted from bootcmd, which runs before
			// write_files, scripts-user (the script part) and runcmd.
			boot := toStrings(m.Merged["bootcmd"])
			if len(boot) == 0 || !strings.HasPrefix(boot[0], "modprobe -a 9p") {
				t.Errorf("bootcmd must start with the share mounts, got %q", boot)
			}
			for _, c := range run {
				if strings.Contains(c, "mount ") || strings.Contains(c, "/etc/fstab") {
					t.Errorf("runcmd still mounts shares: %q", c)
				}
			}
			if files := m.Merged["write_files"]; files == nil {
				t.Error("the user's write_files were lost in the merge")
			}
			if users := m.Merged["users"]; users == nil {
				t.Error("the generated users were lost in the merge")
			}
			if m.Merged["phone_home"] == nil {
				t.Error("phone_home lost in the merge")
			}
		})
		t.Run(ci.name+"/user-scalars-win-lists-prepend", func(t *testing.T) {
			t.Parallel()
			user := []byte("#cloud-config\nhostname: users-choice\nruncmd:\n  - echo user\npackages: [htop]\nphone_home:\n  tries: 1\n")
			r, err := Render(&Spec{Name: "vm1", FQDN: "vm1.example.com", QEMUGuestAgent: true,
				NVIDIA: &NVIDIA{Version: "550.54.14"}, PhoneHome: &PhoneHome{URL: "http://10.0.2.2/x"}, UserData: user})
			if err != nil {
				t.Fatal(err)
			}
			m := ciMerge(t, ci, userDataOf(r))
			if !bytes.Equal(m.Payload[0], user) {
				t.Errorf("user's part changed:\n%q\nwant\n%q", m.Payload[0], user)
			}
			if m.Merged["hostname"] != "users-choice" {
				t.Errorf("hostname %v: the user's scalar must win", m.Merged["hostname"])
			}
			if m.Merged["fqdn"] != "vm1.example.com" {
				t.Errorf("fqdn %v: generated keys the user did not set must stay", m.Merged["fqdn"])
			}
			run := toStrings(m.Merged["runcmd"])
			if len(run) < 4 || run[0] != "systemctl is-enabled --quiet qemu-guest-agent || systemctl enable qemu-guest-agent" || run[1] != "systemctl start --no-block qemu-guest-agent" || run[len(run)-1] != "echo user" {
				t.Errorf("runcmd %q: generated first (agent, then NVIDIA), user's last", run)
			}
			nv := -1
			for i, c := range run {
				if strings.Contains(c, `"$f" --silent --dkms --no-cc-version-check`) {
					nv = i
				}
			}
			if nv < 0 || nv > len(run)-2 {
				t.Errorf("NVIDIA install must run before the user's commands: %q", run)
			}
			pk := toStrings(m.Merged["packages"])
			if strings.Join(pk, ",") != "build-essential,dkms,curl,htop" {
				t.Errorf("packages %q", pk)
			}
			ph, _ := m.Merged["phone_home"].(map[string]any)
			if ph["url"] != "http://10.0.2.2/x" || ph["tries"] != float64(1) {
				t.Errorf("phone_home %v: dicts merge recursively, the user's values win", ph)
			}
		})
		t.Run(ci.name+"/no-generated-content-is-byte-for-byte", func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(filepath.Join("testdata", "input", "cloudinit_config.b64"))
			if err != nil {
				t.Fatal(err)
			}
			r, err := Render(&Spec{Name: "vm1", UserDataBase64: string(raw), Hostname: "h"})
			if err != nil {
				t.Fatal(err)
			}
			m := ciMerge(t, ci, userDataOf(r))
			if strings.Join(m.Parts, ",") != "text/cloud-config,text/x-shellscript" {
				t.Errorf("cloud-init did not read the gzip MIME user data as given: %v", m.Parts)
			}
		})
	}
}

var macRe = regexp.MustCompile(`(?i)\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b`)

func toStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		switch x := x.(type) {
		case string:
			out = append(out, x)
		default:
			b, _ := json.Marshal(x)
			out = append(out, string(b))
		}
	}
	return out
}

// TestCloudInitNetConvert converts every structured network document with
// cloud-init's own converter to ENI, netplan and networkd and checks that
// each MAC, address and gateway survives.
func TestCloudInitNetConvert(t *testing.T) {
	t.Parallel()
	judges := cloudInits(t)
	for _, ci := range judges {
		for _, tc := range goldenSpecs() {
			spec := tc.spec(t)
			r, err := Render(spec)
			if err != nil {
				t.Fatal(err)
			}
			kind, doc := "yaml", r.Files[FileNetworkConfig]
			if r.Format == FormatConfigDrive {
				kind, doc = "network_data.json", r.Files[FileCDNetworkData]
			}
			if doc == nil {
				continue // no network document in this seed
			}
			t.Run(ci.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				in := filepath.Join(t.TempDir(), "net")
				if err := os.WriteFile(in, doc, 0o644); err != nil {
					t.Fatal(err)
				}
				var want []string
				var macArgs []string
				macs := r.MACs
				if len(macs) == 0 { // a raw network config: map the MACs it names
					for _, m := range macRe.FindAll(doc, -1) {
						macs = append(macs, strings.ToLower(string(m)))
					}
				}
				for i, mac := range macs {
					want = append(want, mac)
					// Map the MACs to names as the guest's kernel would.
					macArgs = append(macArgs, "-m", "ens"+itoa(3+i)+","+mac)
				}
				for _, n := range spec.Network {
					want = append(want, n.Addresses...)
					if n.Gateway4 != "" {
						want = append(want, n.Gateway4)
					}
					if n.Gateway6 != "" {
						want = append(want, n.Gateway6)
					}
					want = append(want, n.Nameservers...)
				}
				for _, out := range []string{"eni", "netplan", "networkd"} {
					dir := t.TempDir()
					args := append([]string{"devel", "net-convert", "--network-data", in, "--kind", kind,
						"--directory", dir, "--distro", "debian", "--output-kind", out}, macArgs...)
					res, err := ci.run(t, args...)
					if err != nil {
						t.Errorf("net-convert --kind %s --output-kind %s: %v\n%s\n--- input\n%s", kind, out, err, res, doc)
						continue
					}
					var all bytes.Buffer
					_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
						if err == nil && !d.IsDir() {
							b, _ := os.ReadFile(p)
							all.Write(b)
						}
						return nil
					})
					text := strings.ToLower(all.String())
					for _, w := range want {
						if !strings.Contains(text, strings.ToLower(w)) {
							t.Errorf("%s output lacks %q:\n%s", out, w, all.String())
						}
					}
					if strings.Contains(text, "::/64 gw") || strings.Contains(text, "destination=::/64") {
						t.Errorf("%s output has the ::/64 default-route bug:\n%s", out, all.String())
					}
				}
			})
		}
	}
}

// TestCloudInitMountsModuleDropsShareTags documents, with cloud-init's own
// code, why shares are written to fstab by runcmd instead of through the
// mounts: module: cc_mounts drops any first field that is neither a block
// device nor contains ':'.
func TestCloudInitMountsModuleDropsShareTags(t *testing.T) {
	t.Parallel()
	for _, ci := range cloudInits(t) {
		script := filepath.Join(t.TempDir(), "sanitize.py")
		err := os.WriteFile(script, []byte(`import logging, inspect
from cloudinit.config import cc_mounts
f = cc_mounts.sanitize_devname
args = ["kohaku_shared", lambda x: None]
if "log" in inspect.signature(f).parameters:
    args.append(logging.getLogger())
print(f(*args))
`), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ci.script(t, script)
		if err != nil {
			t.Fatalf("%s: %v\n%s", ci.name, err, out)
		}
		if strings.TrimSpace(string(out)) != "None" {
			t.Errorf("%s: cc_mounts keeps a 9p tag (%q): the mounts: module could be used for shares", ci.name, out)
		}
	}
}

// TestCloudInitReadsScalarsAsStrings loads the rendered YAML with
// cloud-init's own loader (PyYAML, YAML 1.1) and checks that values YAML 1.1
// would turn into numbers, booleans, dates or null come back as the strings
// that were given.
func TestCloudInitReadsScalarsAsStrings(t *testing.T) {
	t.Parallel()
	tricky := []string{"52:54:00:12:34:56", "1:30", "0644", "0x1F", "1e3", ".inf", "2001-12-14", "on", "Off", "yes", "N", "~", "null", "", "- x", "a: b", "#c", "'q'", "\"d\"", "tab\tx", "trailing ", " lead", "multi\nline\n", "multi\nno-newline", "ünï", "ctl\x01"}
	meta := map[string]string{}
	var files []File
	for i, s := range tricky {
		meta["k"+strconv.Itoa(i)] = s
		files = append(files, File{Path: "/f" + strconv.Itoa(i), Content: []byte(s)})
	}
	r, err := Render(&Spec{Name: "vm1", MetaData: meta, WriteFiles: files,
		Network: []NIC{{MAC: "52:54:00:12:34:56", Addresses: []string{"10.0.0.5/24"}}}})
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "load.py")
	if err := os.WriteFile(script, []byte(`import json, sys
from cloudinit import util
for p in sys.argv[1:]:
    data = open(p, "rb").read()
    print(json.dumps(util.load_yaml(data)))
`), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var paths []string
	for _, name := range []string{FileMetaData, FileUserData, FileNetworkConfig} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, r.Files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	for _, ci := range cloudInits(t) {
		out, err := ci.script(t, script, paths...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", ci.name, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var md map[string]any
		var ud struct {
			WriteFiles []struct {
				Path     string `json:"path"`
				Content  any    `json:"content"`
				Encoding string `json:"encoding"`
			} `json:"write_files"`
		}
		var nc struct {
			Ethernets map[string]struct {
				Match map[string]any `json:"match"`
			} `json:"ethernets"`
		}
		if len(lines) != 3 || json.Unmarshal([]byte(lines[0]), &md) != nil || json.Unmarshal([]byte(lines[1]), &ud) != nil || json.Unmarshal([]byte(lines[2]), &nc) != nil {
			t.Fatalf("%s: cannot read loader output:\n%s", ci.name, out)
		}
		for i, s := range tricky {
			if got := md["k"+strconv.Itoa(i)]; got != s {
				t.Errorf("%s: meta-data value %q read back as %#v", ci.name, s, got)
			}
			f := ud.WriteFiles[i]
			content, _ := f.Content.(string)
			if f.Encoding == "b64" {
				b, _ := base64.StdEncoding.DecodeString(content)
				content = string(b)
			}
			if content != s {
				t.Errorf("%s: write_files content %q read back as %#v", ci.name, s, f.Content)
			}
		}
		if got := nc.Ethernets["nic0"].Match["macaddress"]; got != "52:54:00:12:34:56" {
			t.Errorf("%s: MAC read back as %#v", ci.name, got)
		}
	}
}

// TestNVIDIAInstallerFetch: the installer is fetched over https only
// (redirects too), into a private temporary file, and checked against its
// SHA-256 before it runs when one is given.
func TestNVIDIAInstallerFetch(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for _, n := range []*NVIDIA{{Version: "550.54.14"}, {Version: "550.54.14", SHA256: strings.ToUpper(sum)}} {
		cmds := strings.Join(nvidiaCommands(n), "\n")
		for _, want := range []string{"--proto =https", "--proto-redir =https", `f=$(mktemp)`, `trap 'rm -f "$f"' EXIT`, "set -e"} {
			if !strings.Contains(cmds, want) {
				t.Errorf("commands lack %q:\n%s", want, cmds)
			}
		}
		if strings.Contains(cmds, "/tmp/nvidia.run") || strings.Contains(cmds, "curl -fsSL -L") {
			t.Errorf("fixed path or unchecked redirects:\n%s", cmds)
		}
		check := `echo "` + sum + `  $f" | sha256sum -c -;`
		if got := strings.Contains(cmds, check); got != (n.SHA256 != "") {
			t.Errorf("SHA256 %q: check present %v:\n%s", n.SHA256, got, cmds)
		}
		if n.SHA256 != "" && strings.Index(cmds, check) > strings.Index(cmds, `"$f" --silent`) {
			t.Errorf("checked after running:\n%s", cmds)
		}
	}
	// A plain http mirror (allowed only with a SHA-256): http is accepted,
	// and the download is checked before it runs.
	cmds := strings.Join(nvidiaCommands(&NVIDIA{Version: "550.54.14", URLTemplate: "http://mirror.example/{version}.run", SHA256: sum}), "\n")
	for _, want := range []string{"--proto =http,https", "--proto-redir =http,https", `echo "` + sum + `  $f" | sha256sum -c -;`} {
		if !strings.Contains(cmds, want) {
			t.Errorf("http mirror: commands lack %q:\n%s", want, cmds)
		}
	}
}
