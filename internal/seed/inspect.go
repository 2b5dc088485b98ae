package seed

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"

	"github.com/kdomanski/iso9660"
	"gopkg.in/yaml.v3"
)

// Inspection is what can be learnt from a seed ISO itself, so a VM given only
// a seed's volume finds its MACs and instance id without the seed's inputs.
type Inspection struct {
	Format     Format
	Label      string
	InstanceID string
	// MACs are the MAC addresses the network configuration matches, in
	// document order (empty when the seed has no MAC-matched config).
	MACs []string
	// PhoneHomeURL is the phone_home module's URL in the user data, if any.
	PhoneHomeURL string
	// ReportToken is the token in the first-boot reporter's configuration;
	// empty when the seed installs no reporter. A seed with a reporter
	// writes its report to the VM's report channel.
	ReportToken string
	// HeartbeatSeconds is the reporter's heartbeat interval (0: none).
	HeartbeatSeconds int
	// Files holds every file of the ISO by the path cloud-init sees.
	Files map[string][]byte
}

// ReadISO returns an ISO's volume label and its files by path, with the
// ";1" version suffix dropped as the guest kernel does.
func ReadISO(img []byte) (label string, files map[string][]byte, err error) {
	im, err := iso9660.OpenImage(bytes.NewReader(img))
	if err != nil {
		return "", nil, fmt.Errorf("not an ISO 9660 image: %w", err)
	}
	if label, err = im.Label(); err != nil {
		return "", nil, fmt.Errorf("reading the volume label: %w", err)
	}
	root, err := im.RootDir()
	if err != nil {
		return "", nil, fmt.Errorf("reading the root directory: %w", err)
	}
	files = map[string][]byte{}
	var walk func(dir *iso9660.File, prefix string, depth int) error
	walk = func(dir *iso9660.File, prefix string, depth int) error {
		if depth > 8 {
			return fmt.Errorf("directories nested deeper than a seed has")
		}
		children, err := dir.GetChildren()
		if err != nil {
			return fmt.Errorf("listing %q: %w", prefix, err)
		}
		for _, c := range children {
			p := path.Join(prefix, c.Name())
			if c.IsDir() {
				if err := walk(c, p, depth+1); err != nil {
					return err
				}
				continue
			}
			if c.Size() > MaxSeedBytes {
				return fmt.Errorf("%s is %d bytes, larger than any seed", p, c.Size())
			}
			b, err := io.ReadAll(c.Reader())
			if err != nil {
				return fmt.Errorf("reading %s: %w", p, err)
			}
			files[p] = b
		}
		return nil
	}
	if err := walk(root, "", 0); err != nil {
		return "", nil, err
	}
	return label, files, nil
}

// Inspect reads a seed ISO built by Kohaku or by another tool (NoCloud or
// ConfigDrive v2) and reports its format, instance id and MACs.
func Inspect(img []byte) (*Inspection, error) {
	label, files, err := ReadISO(img)
	if err != nil {
		return nil, err
	}
	in := &Inspection{Label: label, Files: files}
	switch strings.ToLower(label) {
	case LabelNoCloud:
		in.Format = FormatNoCloud
		var md map[string]any
		if err := yaml.Unmarshal(files[FileMetaData], &md); err != nil {
			return nil, fmt.Errorf("meta-data is not YAML: %w", err)
		}
		in.InstanceID, _ = md["instance-id"].(string)
		if nc := files[FileNetworkConfig]; len(nc) > 0 {
			if in.MACs, err = netplanMACs(nc); err != nil {
				return nil, fmt.Errorf("network-config: %w", err)
			}
		}
	case LabelConfigDrive:
		in.Format = FormatConfigDrive
		var md struct {
			UUID string `json:"uuid"`
		}
		if err := json.Unmarshal(files[FileCDMetaData], &md); err != nil {
			return nil, fmt.Errorf("%s is not JSON: %w", FileCDMetaData, err)
		}
		in.InstanceID = md.UUID
		if nd := files[FileCDNetworkData]; len(nd) > 0 {
			var net struct {
				Links []struct {
					MAC string `json:"ethernet_mac_address"`
				} `json:"links"`
			}
			if err := json.Unmarshal(nd, &net); err != nil {
				return nil, fmt.Errorf("%s is not JSON: %w", FileCDNetworkData, err)
			}
			for _, l := range net.Links {
				if l.MAC != "" {
					in.MACs = append(in.MACs, strings.ToLower(l.MAC))
				}
			}
		}
	default:
		return nil, fmt.Errorf("volume label %q is neither %q (NoCloud) nor %q (ConfigDrive): not a cloud-init seed", label, LabelNoCloud, LabelConfigDrive)
	}
	ud := files[FileUserData]
	if in.Format == FormatConfigDrive {
		ud = files[FileCDUserData]
	}
	in.PhoneHomeURL = findInUserData(ud, findPhoneHome)
	in.ReportToken = findInUserData(ud, findReportToken)
	if in.ReportToken != "" {
		in.HeartbeatSeconds, _ = strconv.Atoi(findInUserData(ud, findHeartbeat))
		// The reporter posts to the signed URL; name the URL it stands for.
		if id := phonehome.ReportID(in.ReportToken); strings.HasSuffix(in.PhoneHomeURL, "/"+id) {
			in.PhoneHomeURL = strings.TrimSuffix(in.PhoneHomeURL, id) + in.ReportToken
		}
	}
	return in, nil
}

// phoneHomeRE finds the phone_home module's url in a cloud-config.
var phoneHomeRE = regexp.MustCompile(`(?m)^phone_home:\s*\n(?:[ \t]+.*\n)*?[ \t]+url:\s*['"]?([^'"\s]+)`)

// reporterURLRE finds the URL in the reporter's configuration file, which
// the cloud-config carries as a JSON string.
var reporterURLRE = regexp.MustCompile(`\\?"url\\?":\s*\\?"(https?://[^"\\\s]+)\\?"`)

// findPhoneHome looks for the phone_home module's URL, then the reporter's.
func findPhoneHome(b []byte) string {
	if m := phoneHomeRE.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	if m := reporterURLRE.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// reporterTokenRE finds the token in the reporter's configuration.
var reporterTokenRE = regexp.MustCompile(`\\?"token\\?":\s*\\?"([A-Za-z0-9_-]{16,128})\\?"`)

// findReportToken looks for the first-boot reporter's token.
func findReportToken(b []byte) string {
	if !bytes.Contains(b, []byte(ReporterConfigPath)) {
		return ""
	}
	if m := reporterTokenRE.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// reporterHeartbeatRE finds the heartbeat interval in the reporter's
// configuration.
var reporterHeartbeatRE = regexp.MustCompile(`\\?"heartbeat\\?":\s*([0-9]{1,5})\b`)

// findHeartbeat looks for the reporter's heartbeat interval.
func findHeartbeat(b []byte) string {
	if !bytes.Contains(b, []byte(ReporterConfigPath)) {
		return ""
	}
	if m := reporterHeartbeatRE.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// findInUserData applies find to user data: a cloud-config, or a MIME
// multipart document whose cloud-config parts may be base64-encoded.
func findInUserData(ud []byte, find func([]byte) string) string {
	if u := find(ud); u != "" {
		return u
	}
	msg, err := mail.ReadMessage(bytes.NewReader(ud))
	if err != nil {
		return ""
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mediaType, "multipart/") {
		return ""
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextRawPart()
		if err != nil {
			return ""
		}
		var body io.Reader = part
		if strings.EqualFold(part.Header.Get("Content-Transfer-Encoding"), "base64") {
			body = base64.NewDecoder(base64.StdEncoding, part)
		}
		b, err := io.ReadAll(io.LimitReader(body, MaxUserDataBytes))
		if err != nil {
			continue
		}
		if u := find(b); u != "" {
			return u
		}
	}
}

// netplanMACs lists the MACs a network config matches: v2 ethernets'
// match.macaddress in document order, or v1 physical entries' mac_address.
func netplanMACs(doc []byte) ([]string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	if len(root.Content) == 0 {
		return nil, nil
	}
	top := root.Content[0]
	if n := mapValue(top, "network"); n != nil {
		top = n
	}
	var macs []string
	if eth := mapValue(top, "ethernets"); eth != nil && eth.Kind == yaml.MappingNode {
		for i := 1; i < len(eth.Content); i += 2 {
			if m := mapValue(mapValue(eth.Content[i], "match"), "macaddress"); m != nil && m.Value != "" {
				macs = append(macs, strings.ToLower(m.Value))
			}
		}
	}
	if cfg := mapValue(top, "config"); cfg != nil && cfg.Kind == yaml.SequenceNode {
		for _, e := range cfg.Content {
			if m := mapValue(e, "mac_address"); m != nil && m.Value != "" {
				macs = append(macs, strings.ToLower(m.Value))
			}
		}
	}
	return macs, nil
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
