package seed

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
)

// Where the first-boot reporter lives in the guest.
const (
	ReporterScriptPath = "/usr/local/lib/kohaku/report.py"
	ReporterConfigPath = "/etc/kohaku/report.json"
	ReporterUnitPath   = "/etc/systemd/system/kohaku-report.service"
	ReporterChannel    = "org.kohaku.report.0"
)

//go:embed reporter.py
var reporterScript []byte

// reporterUnit runs the reporter once cloud-init's last stage is over.
const reporterUnit = `[Unit]
Description=Kohaku first-boot report to the provider
After=cloud-final.service network-online.target
Wants=network-online.target
ConditionPathExists=` + ReporterConfigPath + `

[Service]
Type=exec
ExecStart=/usr/bin/python3 ` + ReporterScriptPath + `
TimeoutStartSec=0

[Install]
WantedBy=multi-user.target
`

// ReporterCommands start the reporter from runcmd without waiting for it:
// the unit is ordered after cloud-final, which runcmd is part of.
var ReporterCommands = []string{
	"systemctl daemon-reload",
	"systemctl enable kohaku-report.service",
	"systemctl start --no-block kohaku-report.service",
}

// reporter is what the first-boot reporter is configured with: where to
// post (empty: the channel only) and the token its report carries.
type reporter struct {
	URL, Token string
}

// reporter says whether the seed installs the first-boot reporter and how.
func (s *Spec) reporter() *reporter {
	ph := s.PhoneHome
	switch {
	case ph != nil && ph.Reporter:
		return &reporter{URL: ph.URL, Token: ph.Token}
	case s.ReportChannel:
		r := &reporter{Token: s.reportToken}
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

// reporterFiles are the script, its configuration (holding the token, so
// readable by root only) and the systemd unit.
func reporterFiles(r *reporter) []File {
	cfg, _ := json.Marshal(map[string]string{"url": r.URL, "token": r.Token, "channel": ReporterChannel})
	return []File{
		{Path: ReporterScriptPath, Content: reporterScript, Permissions: "0755"},
		{Path: ReporterConfigPath, Content: append(cfg, '\n'), Permissions: "0600"},
		{Path: ReporterUnitPath, Content: []byte(reporterUnit), Permissions: "0644"},
	}
}
