package seed

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// Where the first-boot reporter lives in the guest.
const (
	ReporterScriptPath = "/usr/local/lib/kohaku/report.py"
	ReporterConfigPath = "/etc/kohaku/report.json"
	ReporterUnitPath   = "/etc/systemd/system/kohaku-report.service"
)

//go:embed reporter.py
var reporterScript []byte

// reporterScriptGzB64 is the script as write_files carries it
// (encoding: gz+b64, which every cloud-init generation decodes): 40 % of
// the plain text, so user data, the ISO a refresh reads and the state of
// every seed shrink with it. Compressed once, with no name and no time in
// the gzip header, so seeds stay byte-for-byte reproducible.
var reporterScriptGzB64 = func() string {
	var b bytes.Buffer
	w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	w.Write(reporterScript) //nolint:errcheck // writes to memory
	w.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}()

// reporterUnit runs the reporter once cloud-init's last stage is over; with
// heartbeats it stays as the guest's health agent, restarted if it fails.
const reporterUnit = `[Unit]
Description=Kohaku first-boot report and heartbeats to the provider
After=cloud-final.service network-online.target
Wants=network-online.target
ConditionPathExists=` + ReporterConfigPath + `

[Service]
Type=exec
ExecStart=/usr/bin/python3 ` + ReporterScriptPath + `
TimeoutStartSec=0
Restart=on-failure
RestartSec=5
Nice=10

[Install]
WantedBy=multi-user.target
`

// QEMUGuestAgentCommands enable qemu-guest-agent where the image has it
// disabled and start it without making runcmd wait. The unit is bound to the
// agent's virtio port: "systemctl enable --now" blocks until the port's
// device appears, and on a VM without the guest agent channel that is
// systemd's whole device timeout (90 s) before the rest of runcmd, the
// reporter included, runs. Where the unit is static or already enabled (Debian
// and Ubuntu start it from a udev rule), "systemctl enable" is skipped: there
// it only syncs the SysV script, which costs seconds of a first boot.
var QEMUGuestAgentCommands = []string{
	"systemctl is-enabled --quiet qemu-guest-agent || systemctl enable qemu-guest-agent",
	"systemctl start --no-block qemu-guest-agent",
}

// ReporterCommands start the reporter from runcmd without waiting for it:
// the unit is ordered after cloud-final, which runcmd is part of. No
// "systemctl daemon-reload" first: enable reloads the manager itself (also
// when the unit is already enabled, as in a guest captured from one that
// ran it), so systemd knows the unit write_files wrote before start, and a
// second reload cost 6-7 s of a first boot under TCG (systemd 252, which
// re-runs every generator, cloud-init's ds-identify among them).
var ReporterCommands = []string{
	"systemctl enable kohaku-report.service",
	"systemctl start --no-block kohaku-report.service",
}

// reporter is what the first-boot reporter is configured with: where to
// post (empty: the channel only) and the token its report carries.
type reporter struct {
	URL, Token string
	// Heartbeat is the agent's interval in seconds (0: no agent).
	Heartbeat int
}

// reporter says whether the seed installs the first-boot reporter and how.
func (s *Spec) reporter() *reporter {
	ph := s.PhoneHome
	hb := 0
	if s.ReportChannel {
		hb = s.HeartbeatSeconds
	}
	switch {
	case ph != nil && ph.Reporter:
		return &reporter{URL: ph.URL, Token: ph.Token, Heartbeat: hb}
	case s.ReportChannel:
		r := &reporter{Token: s.reportToken, Heartbeat: hb}
		if r.Token == "" && ph != nil {
			r.Token = ph.Token
		}
		if r.Token == "" {
			r.Token = DerivedReportToken(s)
		}
		return r
	}
	return nil
}

// placeholderReportToken stands in for the token while deriving it.
const placeholderReportToken = "kohaku-report-token-placeholder0"

// DerivedReportToken is the token of a seed that reports over the channel
// only: a digest of the documents the seed renders to (with a placeholder
// token and instance id, since the instance id is itself derived from the
// documents), so it is known at plan time, is the same for the same inputs
// whether the instance id was given or derived, and differs between seeds.
// It is not a secret (the channel is not reachable from the network); it
// tells the VM that a report comes from a guest booted with this seed.
func DerivedReportToken(s *Spec) string {
	c := *s
	c.ReportChannel, c.InstanceID, c.reportToken = true, "kohaku-report-token", placeholderReportToken
	if c.PhoneHome != nil && !c.PhoneHome.Reporter {
		ph := *c.PhoneHome
		ph.Token = ""
		c.PhoneHome = &ph
	}
	h := sha256.New()
	h.Write([]byte("kohaku-report-token\x00"))
	pl, err := prepare(&c)
	var docs *documents
	if err == nil {
		docs, err = renderDocuments(pl)
	}
	if err != nil {
		// Invalid specs never upload; any stable digest will do.
		fmt.Fprintf(h, "%#v", c)
	} else {
		names := make([]string, 0, len(docs.files))
		for n := range docs.files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(h, "%s\x00%d\x00", n, len(docs.files[n]))
			h.Write(docs.files[n])
		}
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:24])
}

// Expectation is what the seed declared, as the reporter checks it against
// what the guest has (the "expect" of its configuration).
type Expectation struct {
	// Hostname the guest should have (empty: not checked).
	Hostname string `json:"hostname,omitempty"`
	// NICs declared by the structured network configuration.
	NICs []ExpectedNIC `json:"nics,omitempty"`
	// Nameservers and Search domains declared on any NIC, each of which
	// should be in use.
	Nameservers []string `json:"nameservers,omitempty"`
	Search      []string `json:"search,omitempty"`
	// Mounts are the shares' mount points.
	Mounts []string `json:"mounts,omitempty"`
	// NVIDIADriver is the NVIDIA driver version the seed installs, which
	// nvidia-smi should report for the guest's GPUs.
	NVIDIADriver string `json:"nvidia_driver,omitempty"`
}

// ExpectedNIC is one declared NIC, found in the guest by its MAC.
type ExpectedNIC struct {
	MAC string `json:"mac"`
	// Name is the set_name, preferred when several interfaces share the MAC.
	Name      string   `json:"name,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	DHCP4     bool     `json:"dhcp4,omitempty"`
	DHCP6     bool     `json:"dhcp6,omitempty"`
	Gateway4  string   `json:"gateway4,omitempty"`
	Gateway6  string   `json:"gateway6,omitempty"`
}

// expectation is what a validated spec declares. A raw network_config is
// not read: only the structured network is checked.
func expectation(pl *plan) Expectation {
	var e Expectation
	e.Hostname = pl.hostname
	if e.Hostname == "" && pl.spec.FQDN != "" {
		e.Hostname, _, _ = strings.Cut(pl.spec.FQDN, ".")
	}
	seen := map[string]bool{}
	add := func(list *[]string, v string) {
		if !seen[v] {
			seen[v] = true
			*list = append(*list, v)
		}
	}
	if len(pl.spec.NetworkConfig) == 0 {
		for _, n := range pl.nics {
			x := ExpectedNIC{MAC: n.mac, Name: n.setName, DHCP4: n.dhcp4, DHCP6: n.dhcp6}
			for _, a := range n.addrs {
				x.Addresses = append(x.Addresses, a.String())
			}
			if n.gw4.IsValid() {
				x.Gateway4 = n.gw4.String()
			}
			if n.gw6.IsValid() {
				x.Gateway6 = n.gw6.String()
			}
			e.NICs = append(e.NICs, x)
			for _, ns := range n.nameservers {
				add(&e.Nameservers, ns.String())
			}
			for _, d := range n.search {
				add(&e.Search, d)
			}
		}
	}
	for _, m := range pl.spec.Mounts {
		add(&e.Mounts, m.Path)
	}
	if pl.spec.NVIDIA != nil {
		e.NVIDIADriver = pl.spec.NVIDIA.Version
	}
	return e
}

// reporterFiles are the script, its configuration (holding the token, so
// readable by root only, and what the seed declared) and the systemd unit.
// The reporter posts to the signed URL (phonehome.SignedURL), which does
// not carry the token, and signs each body with it.
func reporterFiles(r *reporter, expect Expectation) []File {
	cfg, _ := json.Marshal(struct {
		URL       string      `json:"url"`
		Token     string      `json:"token"`
		Channel   string      `json:"channel"`
		Expect    Expectation `json:"expect"`
		Heartbeat int         `json:"heartbeat,omitempty"`
	}{phonehome.SignedURL(r.URL, r.Token), r.Token, phonehome.ReportChannel, expect, r.Heartbeat})
	return []File{
		{Path: ReporterScriptPath, Content: reporterScript, Permissions: "0755"},
		{Path: ReporterConfigPath, Content: append(cfg, '\n'), Permissions: "0600"},
		{Path: ReporterUnitPath, Content: []byte(reporterUnit), Permissions: "0644"},
	}
}
