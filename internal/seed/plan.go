package seed

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"unicode/utf8"
)

// plan is a validated, normalised Spec: what the renderers work from.
type plan struct {
	spec     *Spec
	format   Format
	label    string
	hostname string
	nics     []nicPlan
	user     *userInput
	warnings []string
}

type nicPlan struct {
	id, mac, setName string
	dhcp4, dhcp6     bool
	addrs            []netip.Prefix
	gw4, gw6         netip.Addr
	nameservers      []netip.Addr
	search           []string
}

// prepare validates a Spec and normalises it into a plan.
func prepare(s *Spec) (*plan, error) {
	if s == nil {
		return nil, invalid("spec", "is nil", "&seed.Spec{Name: \"vm1\"}", nil)
	}
	p := &problems{}
	pl := &plan{spec: s, format: s.Format}

	switch {
	case s.Name == "":
		p.add("name", "is required", `"vm1"`)
	case !nameRe.MatchString(s.Name):
		p.add("name", fmt.Sprintf("%q has characters other than letters, digits, '.', '_' and '-', or is longer than 63", s.Name), `"gpu-vm-1"`)
	}

	switch s.Format {
	case "", FormatNoCloud:
		pl.format, pl.label = FormatNoCloud, LabelNoCloud
	case FormatConfigDrive:
		pl.label = LabelConfigDrive
	default:
		p.add("format", fmt.Sprintf("unknown format %q", s.Format), `"nocloud" or "configdrive"`)
	}

	if s.InstanceID != "" && (!singleLine(s.InstanceID) || strings.ContainsAny(s.InstanceID, " \t") || len(s.InstanceID) > 255 || !utf8.ValidString(s.InstanceID)) {
		p.add("instance_id", fmt.Sprintf("%q must be at most 255 printable characters without spaces", s.InstanceID), `"vm1-2024-01"`)
	}

	pl.hostname = s.Hostname
	if s.Hostname != "" {
		if !validHostname(s.Hostname) {
			p.add("hostname", fmt.Sprintf("%q is not a valid host name (letters, digits and '-' in dot-separated labels of at most 63)", s.Hostname), `"gpu-vm-1"`)
		}
	} else if validHostname(s.Name) {
		pl.hostname = s.Name
	}
	if s.FQDN != "" && (!validHostname(s.FQDN) || !strings.Contains(s.FQDN, ".")) {
		p.add("fqdn", fmt.Sprintf("%q is not a fully qualified domain name", s.FQDN), `"gpu-vm-1.example.com"`)
	}

	for i, k := range s.PublicKeys {
		if msg := sshKeyProblem(k); msg != "" {
			p.add(fmt.Sprintf("public_keys[%d]", i), msg, `"ssh-ed25519 AAAAC3Nza... user@host"`)
		}
	}
	keys := make([]string, 0, len(s.MetaData))
	for k := range s.MetaData {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.TrimSpace(k) == "" || !utf8.ValidString(k) || strings.ContainsAny(k, "\r\n\x00") {
			p.add(fmt.Sprintf("meta_data[%q]", k), "key must be a non-empty single line", `{"availability-zone" = "rack-1"}`)
		}
		if !utf8.ValidString(s.MetaData[k]) {
			p.add(fmt.Sprintf("meta_data[%q]", k), "value is not valid UTF-8", `{"availability-zone" = "rack-1"}`)
		}
	}

	validateUser(s, p)
	validateSystem(s, p)
	validateFiles(s, p)
	validateMounts(s, p)
	validateNVIDIA(s, p)
	validatePhoneHome(s, p)
	pl.nics = validateNetwork(s, pl.format, p)

	pl.user = decodeUserData(s, p)
	if len(s.VendorData) > MaxVendorDataBytes {
		p.add("vendor_data", fmt.Sprintf("is %d bytes, more than %d (MaxVendorDataBytes)", len(s.VendorData), MaxVendorDataBytes), "keep vendor data under 16 MiB")
	} else if pl.format == FormatConfigDrive && len(s.VendorData) > 0 && !utf8.Valid(s.VendorData) {
		p.add("vendor_data", "must be UTF-8 text for ConfigDrive (it is carried inside vendor_data.json)", "#cloud-config\\npackages: [htop]")
	}

	if err := p.err(); err != nil {
		return nil, err
	}
	return pl, nil
}
