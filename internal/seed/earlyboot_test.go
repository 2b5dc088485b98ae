package seed

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestCloudInitRunsBootcmdFirst reads the module lists of both cloud-init
// generations' Debian cloud.cfg and checks the order the seed relies on:
// bootcmd (where the shares are mounted) runs before write_files and users
// in the network stage, and the user's scripts and runcmd run later
// (scripts-user, in the final stage, runs both the shell-script parts and
// the runcmd script).
func TestCloudInitRunsBootcmdFirst(t *testing.T) {
	t.Parallel()
	judges := cloudInits(t)
	for _, g := range generations {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			ci := judgeFor(t, judges, g)
			cfgPath := "/etc/cloud/cloud.cfg"
			for _, e := range ci.env {
				if p, ok := strings.CutPrefix(e, "PYTHONPATH="); ok {
					cfgPath = filepath.Join(p, "..", "..", "..", "..", "etc", "cloud", "cloud.cfg")
				}
			}
			b, err := os.ReadFile(cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := yaml.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			var order []string
			for _, stage := range []string{"cloud_init_modules", "cloud_config_modules", "cloud_final_modules"} {
				list, _ := cfg[stage].([]any)
				for _, m := range list {
					if s, ok := m.(string); ok {
						order = append(order, strings.ReplaceAll(s, "-", "_"))
					}
				}
			}
			pos := func(m string) int {
				for i, x := range order {
					if x == m {
						return i
					}
				}
				t.Fatalf("%s: module %s not in %s: %v", g.name, m, cfgPath, order)
				return -1
			}
			boot := pos("bootcmd")
			for _, later := range []string{"write_files", "users_groups", "runcmd", "scripts_user"} {
				if pos(later) < boot {
					t.Errorf("%s: %s runs before bootcmd: %v", g.name, later, order)
				}
			}
		})
	}
}

// TestResolvConfCommand runs the generated resolv.conf line with sh against
// files in a temporary directory: a plain resolv.conf gets the declared
// servers first and keeps a DHCP server; a symlinked one is left alone.
func TestResolvConfCommand(t *testing.T) {
	t.Parallel()
	sh := requireTool(t, "sh")
	r, err := Render(&Spec{Name: "vm1", Network: []NIC{
		{MAC: "52:54:00:12:34:56", Addresses: []string{"10.0.2.15/24"}, Gateway4: "10.0.2.2",
			Nameservers: []string{"10.0.2.3", "2001:db8::53"}, SearchDomains: []string{"lab.example.com"}},
		{MAC: "52:54:00:12:34:57", DHCP4: true, Nameservers: []string{"10.0.2.3"}, SearchDomains: []string{"example.com"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Bootcmd []string `yaml:"bootcmd"`
	}
	if err := yaml.Unmarshal(r.Files[FileUserData], &doc); err != nil {
		t.Fatal(err)
	}
	var line string
	for _, c := range doc.Bootcmd {
		if strings.Contains(c, "/etc/resolv.conf") {
			line = c
		}
	}
	if line == "" {
		t.Fatalf("no resolv.conf command in bootcmd: %q", doc.Bootcmd)
	}
	run := func(t *testing.T, dir string) {
		t.Helper()
		cmd := exec.Command(sh, "-c", strings.ReplaceAll(line, "/etc/resolv.conf", filepath.Join(dir, "resolv.conf")))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	t.Run("plain-file", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("domain old\nsearch old.example\nnameserver 10.0.2.3\nnameserver 192.0.2.1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, dir)
		got, _ := os.ReadFile(filepath.Join(dir, "resolv.conf"))
		want := "# written by kohaku from the seed (no resolvconf or systemd-resolved)\nnameserver 10.0.2.3\nnameserver 2001:db8::53\nsearch lab.example.com example.com\nnameserver 192.0.2.1\n"
		if string(got) != want {
			t.Errorf("resolv.conf:\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("symlink-left-alone", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "stub-resolv.conf")
		if err := os.WriteFile(target, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "resolv.conf")); err != nil {
			t.Fatal(err)
		}
		run(t, dir)
		got, _ := os.ReadFile(target)
		if string(got) != "nameserver 127.0.0.53\n" {
			t.Errorf("a symlinked resolv.conf was changed: %q", got)
		}
		if fi, err := os.Lstat(filepath.Join(dir, "resolv.conf")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the symlink was replaced: %v", err)
		}
	})
}
