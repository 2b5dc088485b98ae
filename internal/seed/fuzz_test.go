package seed

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

// fuzzInput is one FuzzRender input; its fields are the fuzz arguments in
// order.
type fuzzInput struct {
	name, hostname  string
	configDrive     bool
	userData        []byte
	userDataBase64  bool
	mac, addr, gw   string
	fileContent     []byte
	metaKey         string
	metaVal         string
	mountTag, mount string
}

// fuzzSeeds is the committed seed corpus (testdata/fuzz/FuzzRender),
// rewritten with go test -run TestFuzzCorpus -update.
func fuzzSeeds(t testing.TB) []fuzzInput {
	tf := mustB64(t, string(readInput(t, "cloudinit_config.b64")))
	return []fuzzInput{
		{"vm1", "", false, nil, false, "", "10.0.2.15/24", "10.0.2.2", []byte("hello\n"), "zone", "a", "kohaku_shared", "/shared"},
		{"gpu-vm-1", "gpu1", true, []byte("#cloud-config\nruncmd: [echo]\n"), false, "52:54:00:12:34:56", "2001:db8::5/64", "2001:db8::1", []byte{0, 0xff}, "instance-id", "x", "t", "/m"},
		{"vm2", "h", false, tf, false, "52:54:00:ab:cd:ef", "192.168.1.10/24", "192.168.1.1", []byte("--MIMEBOUNDARY\n"), "on", "yes", "datasets", "/data"},
		{"vm3", "", true, tf, true, "", "10.0.0.5/31", "10.0.0.4", []byte("0644"), "k", "52:54:00:12:34:56", "a", "/a"},
		{"vm4", "", false, []byte("#!/bin/sh\necho hi\n"), true, "52-54-00-00-00-01", "fd00::1/64", "fe80::1", []byte("multi\nline"), "k", "", "x", "/x"},
		{"vm5", "", false, []byte("#cloud-config\na: b: c\n"), false, "bad", "10.0.2.300/24", "10.0.3.1", nil, "k", "v", "a b", "rel"},
		{"vm6", "", false, []byte("Content-Type: multipart/mixed; boundary=b\nMIME-Version: 1.0\n\n--b\nContent-Type: text/plain\n\nhi\n"), false, "", "10.0.2.15/24", "", []byte("ü\t\r\n"), "k", "~", "t", "/t"},
		{"vm7", "", false, gz(t, []byte("#cloud-config\n{}\n")), true, "", "", "", nil, "k", "v", "t", "/t"},
	}
}

// fuzzSpec turns fuzz arguments into a Spec that uses every generator.
func fuzzSpec(in fuzzInput) *Spec {
	s := &Spec{
		Name:           in.name,
		Hostname:       in.hostname,
		MetaData:       map[string]string{in.metaKey: in.metaVal},
		User:           &User{Name: "kohaku", SSHAuthorizedKeys: []string{keyEd25519}},
		WriteFiles:     []File{{Path: "/etc/fuzz", Content: in.fileContent}},
		Mounts:         []Mount{{Type: Mount9P, Tag: in.mountTag, Path: in.mount}},
		QEMUGuestAgent: true,
		PhoneHome:      &PhoneHome{URL: "http://10.0.2.2:8080/"},
	}
	if in.configDrive {
		s.Format = FormatConfigDrive
	}
	nic := NIC{MAC: in.mac}
	if in.addr != "" {
		nic.Addresses = []string{in.addr}
	}
	if len(in.gw) > 0 && bytes.ContainsRune([]byte(in.gw), ':') {
		nic.Gateway6 = in.gw
	} else {
		nic.Gateway4 = in.gw
	}
	s.Network = []NIC{nic}
	if in.userDataBase64 {
		s.UserDataBase64 = base64.StdEncoding.EncodeToString(in.userData)
	} else {
		s.UserData = in.userData
	}
	return s
}

func FuzzRender(f *testing.F) {
	f.Fuzz(func(t *testing.T, name, hostname string, configDrive bool, userData []byte, userDataBase64 bool,
		mac, addr, gw string, fileContent []byte, metaKey, metaVal, mountTag, mount string) {
		in := fuzzInput{name, hostname, configDrive, userData, userDataBase64, mac, addr, gw, fileContent, metaKey, metaVal, mountTag, mount}
		spec := fuzzSpec(in)
		r, err := Render(spec)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) || len(ValidationErrors(err)) == 0 {
				t.Fatalf("Render failed with something other than validation errors: %v", err)
			}
			return
		}
		checkRendered(t, spec, r)
	})
}

// checkRendered asserts what must hold for every rendered seed: every YAML
// and JSON document parses, generated values read back as given, and the
// ISO reads back with every file's bytes.
func checkRendered(t *testing.T, spec *Spec, r *Result) {
	t.Helper()
	for name, b := range r.Files {
		switch filepath.Ext(name) {
		case ".json":
			if !json.Valid(b) {
				t.Errorf("%s is not valid JSON:\n%s", name, b)
			}
		}
	}
	var generated []byte
	ud := userDataOf(r)
	if r.UserDataMerged {
		ctypes, bodies, _ := parts(t, ud)
		if ctypes[len(ctypes)-1] != "text/cloud-config" {
			t.Fatalf("last part is %s", ctypes[len(ctypes)-1])
		}
		generated = bodies[len(bodies)-1]
	} else {
		generated = ud
	}
	var cc struct {
		WriteFiles []struct {
			Content  string `yaml:"content"`
			Encoding string `yaml:"encoding"`
		} `yaml:"write_files"`
	}
	if err := yaml.Unmarshal(generated, &cc); err != nil {
		t.Fatalf("generated cloud-config does not parse: %v\n%s", err, generated)
	}
	if len(cc.WriteFiles) != 1 {
		t.Fatalf("write_files: %+v", cc.WriteFiles)
	}
	got := []byte(cc.WriteFiles[0].Content)
	if cc.WriteFiles[0].Encoding == "b64" {
		var err error
		if got, err = base64.StdEncoding.DecodeString(cc.WriteFiles[0].Content); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, spec.WriteFiles[0].Content) {
		t.Errorf("write_files content %q read back as %q", spec.WriteFiles[0].Content, got)
	}
	if r.Format == FormatNoCloud {
		var md map[string]string
		if err := yaml.Unmarshal(r.Files[FileMetaData], &md); err != nil {
			t.Fatalf("meta-data does not parse: %v\n%s", err, r.Files[FileMetaData])
		}
		if md["instance-id"] != r.InstanceID {
			t.Errorf("meta-data instance-id %q, want %q", md["instance-id"], r.InstanceID)
		}
		for k, v := range spec.MetaData {
			if k != "instance-id" && k != "local-hostname" && md[k] != v {
				t.Errorf("meta-data %q = %q, want %q", k, md[k], v)
			}
		}
		var nc struct {
			Ethernets map[string]struct {
				Match struct {
					MAC string `yaml:"macaddress"`
				} `yaml:"match"`
			} `yaml:"ethernets"`
		}
		if err := yaml.Unmarshal(r.Files[FileNetworkConfig], &nc); err != nil {
			t.Fatalf("network-config does not parse: %v", err)
		}
		if nc.Ethernets["nic0"].Match.MAC != r.MACs[0] {
			t.Errorf("network-config MAC %q, want %q", nc.Ethernets["nic0"].Match.MAC, r.MACs[0])
		}
	}
	label, files, _ := readISO(t, r.ISO)
	if label != r.Label || len(files) != len(r.Files) {
		t.Fatalf("ISO label %q with %d files, want %q with %d", label, len(files), r.Label, len(r.Files))
	}
	for name, b := range r.Files {
		if !bytes.Equal(files[name], b) {
			t.Errorf("ISO %s differs", name)
		}
	}
}

// TestFuzzCorpus runs the committed seed corpus through the same checks and
// makes sure it is there (go test -run TestFuzzCorpus -update rewrites it).
func TestFuzzCorpus(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "fuzz", "FuzzRender")
	seeds := fuzzSeeds(t)
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			var b bytes.Buffer
			b.WriteString("go test fuzz v1\n")
			fmt.Fprintf(&b, "string(%q)\nstring(%q)\nbool(%v)\n[]byte(%q)\nbool(%v)\nstring(%q)\nstring(%q)\nstring(%q)\n[]byte(%q)\nstring(%q)\nstring(%q)\nstring(%q)\nstring(%q)\n",
				s.name, s.hostname, s.configDrive, s.userData, s.userDataBase64, s.mac, s.addr, s.gw, s.fileContent, s.metaKey, s.metaVal, s.mountTag, s.mount)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < len(seeds) {
		t.Fatalf("seed corpus %s has %d files, want %d (go test -run TestFuzzCorpus -update): %v", dir, len(entries), len(seeds), err)
	}
	valid := 0
	for i, s := range seeds {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			spec := fuzzSpec(s)
			r, err := Render(spec)
			if err != nil {
				if !errors.Is(err, ErrInvalidSpec) {
					t.Fatal(err)
				}
				return
			}
			valid++
			checkRendered(t, spec, r)
		})
	}
	if valid < len(seeds)-2 {
		t.Errorf("only %d of %d seeds render: the corpus should mostly exercise rendering", valid, len(seeds))
	}
}
