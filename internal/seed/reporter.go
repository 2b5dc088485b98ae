package seed

import (
	_ "embed"
	"encoding/json"
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
Type=oneshot
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

// reporterFiles are the script, its configuration (holding the secret
// token, so readable by root only) and the systemd unit.
func reporterFiles(ph *PhoneHome) []File {
	cfg, _ := json.Marshal(map[string]string{"url": ph.URL, "token": ph.Token, "channel": ReporterChannel})
	return []File{
		{Path: ReporterScriptPath, Content: reporterScript, Permissions: "0755"},
		{Path: ReporterConfigPath, Content: append(cfg, '\n'), Permissions: "0600"},
		{Path: ReporterUnitPath, Content: []byte(reporterUnit), Permissions: "0644"},
	}
}
