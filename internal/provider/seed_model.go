package provider

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// volumeNameRE is what Kohaku accepts as a volume name: safe as a file name
// in a dir pool and in an import ID.
var volumeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`)

func configValidatorAtMostOneOf(paths ...path.Expression) resource.ConfigValidator {
	return resourcevalidator.Conflicting(paths...)
}

// placeholderPhoneHomeURL stands in for the real URL when only validating.
const placeholderPhoneHomeURL = "http://phone-home.invalid:8787/v1/phone-home/validation-placeholder-token-000000000000"

// spec translates the model into the seed package's input. wo is the
// write-only user data from the configuration (null outside apply and plan);
// phURL is the phone-home URL, used when phone_home is on.
func (m *seedResourceModel) spec(wo types.String, phURL string) (*seed.Spec, diag.Diagnostics) {
	var diags diag.Diagnostics
	s := &seed.Spec{
		Name:           m.Name.ValueString(),
		Format:         seed.Format(m.Format.ValueString()),
		InstanceID:     m.InstanceID.ValueString(),
		Hostname:       m.Hostname.ValueString(),
		FQDN:           m.FQDN.ValueString(),
		MetaData:       m.MetaData,
		QEMUGuestAgent: m.GuestAgent.IsNull() || m.GuestAgent.ValueBool(),
		NetworkConfig:  []byte(m.NetworkConfig.ValueString()),
		UserData:       []byte(m.UserData.ValueString()),
		UserDataBase64: m.UserDataBase64.ValueString(),
		VendorData:     []byte(m.VendorData.ValueString()),
		ReportChannel:  m.ReportChannel.IsNull() || m.ReportChannel.ValueBool(),
	}
	if !wo.IsNull() {
		s.UserData = []byte(wo.ValueString())
	}
	if m.PhoneHome.ValueBool() && phURL != "" {
		s.PhoneHome = &seed.PhoneHome{URL: phURL}
		if m.PhoneHomeAgent.IsNull() || m.PhoneHomeAgent.ValueBool() {
			s.PhoneHome.Reporter = true
			s.PhoneHome.Token = phURL[strings.LastIndex(phURL, "/")+1:]
		}
	}
	if u := m.User; u != nil {
		s.User = &seed.User{
			Name:              u.Name.ValueString(),
			Shell:             u.Shell.ValueString(),
			Groups:            strings_(u.Groups),
			SSHAuthorizedKeys: strings_(u.SSHAuthorizedKeys),
		}
		if !u.Sudo.IsNull() {
			v := u.Sudo.ValueString()
			s.User.Sudo = &v
		}
		if !u.LockPassword.IsNull() {
			v := u.LockPassword.ValueBool()
			s.User.LockPassword = &v
		}
		s.RootAuthorizedKeys = u.RootAuthorizedKeys.ValueBool()
		s.PermitRootLogin = u.PermitRootLogin.ValueBool()
	}
	for i, f := range m.WriteFiles {
		file := seed.File{
			Path:        f.Path.ValueString(),
			Permissions: f.Permissions.ValueString(),
			Owner:       f.Owner.ValueString(),
			Append:      f.Append.ValueBool(),
		}
		switch {
		case !f.Content.IsNull() && !f.ContentBase64.IsNull():
			diags.AddAttributeError(path.Root("write_files").AtListIndex(i), "Conflicting file content",
				"Set either content (text) or content_base64 (binary), not both.")
		case !f.ContentBase64.IsNull():
			b, err := base64.StdEncoding.DecodeString(f.ContentBase64.ValueString())
			if err != nil {
				diags.AddAttributeError(path.Root("write_files").AtListIndex(i).AtName("content_base64"), "Invalid base64",
					fmt.Sprintf("content_base64 is not standard base64: %v. For example: filebase64(\"${path.module}/blob.bin\").", err))
			}
			file.Content = b
		default:
			file.Content = []byte(f.Content.ValueString())
		}
		s.WriteFiles = append(s.WriteFiles, file)
	}
	for _, mt := range m.SharedFolders {
		s.Mounts = append(s.Mounts, seed.Mount{
			Type:     seed.MountType(orDefaultString(mt.Type.ValueString(), string(seed.Mount9P))),
			Tag:      mt.Tag.ValueString(),
			Path:     mt.Path.ValueString(),
			ReadOnly: mt.ReadOnly.ValueBool(),
			MSize:    int(mt.MSize.ValueInt64()),
		})
	}
	if n := m.NVIDIA; n != nil {
		s.NVIDIA = &seed.NVIDIA{Version: n.Version.ValueString(), URLTemplate: n.URLTemplate.ValueString()}
	}
	for _, n := range m.Network {
		s.Network = append(s.Network, seed.NIC{
			ID:            n.ID.ValueString(),
			MAC:           n.MAC.ValueString(),
			SetName:       n.SetName.ValueString(),
			DHCP4:         n.DHCP4.ValueBool(),
			DHCP6:         n.DHCP6.ValueBool(),
			Addresses:     strings_(n.Addresses),
			Gateway4:      n.Gateway4.ValueString(),
			Gateway6:      n.Gateway6.ValueString(),
			Nameservers:   strings_(n.Nameservers),
			SearchDomains: strings_(n.SearchDomains),
		})
	}
	return s, diags
}

// setRendered copies what the renderer produced into the computed attributes.
func (m *seedResourceModel) setRendered(res *seed.Result, writeOnly bool) {
	m.SHA256 = types.StringValue(res.ISOSHA256)
	m.SizeBytes = types.Int64Value(int64(len(res.ISO)))
	m.InstanceID = types.StringValue(res.InstanceID)
	m.MACs = stringList(res.MACs)
	m.RenderedMetaData = types.StringValue(string(res.Files[metaDataFile(res.Format)]))
	m.RenderedNetworkConfig = types.StringValue(string(res.Files[networkFile(res.Format)]))
	m.RenderedVendorData = types.StringValue(string(res.Files[vendorDataFile(res.Format)]))
	m.UserDataFromWriteOnly = types.BoolValue(writeOnly)
	if writeOnly {
		m.RenderedUserData = types.StringValue("")
	} else {
		m.RenderedUserData = types.StringValue(string(res.Files[userDataFile(res.Format)]))
	}
}

// seedFiles names each document inside a seed of either format.
var seedFiles = map[seed.Format]struct{ meta, user, network, vendor string }{
	seed.FormatNoCloud:     {seed.FileMetaData, seed.FileUserData, seed.FileNetworkConfig, seed.FileVendorData},
	seed.FormatConfigDrive: {seed.FileCDMetaData, seed.FileCDUserData, seed.FileCDNetworkData, seed.FileCDVendorData},
}

func metaDataFile(f seed.Format) string   { return seedFiles[f].meta }
func userDataFile(f seed.Format) string   { return seedFiles[f].user }
func networkFile(f seed.Format) string    { return seedFiles[f].network }
func vendorDataFile(f seed.Format) string { return seedFiles[f].vendor }

// seedPathNames maps the seed package's input names to this schema's.
var seedPathNames = map[string][]string{
	"mounts":               {"shared_folders"},
	"nvidia":               {"nvidia_driver"},
	"root_authorized_keys": {"user", "root_authorized_keys"},
	"permit_root_login":    {"user", "permit_root_login"},
}

// addSeedErrors turns the renderer's validation errors into attribute errors.
func addSeedErrors(diags *diag.Diagnostics, err error) {
	verrs := seed.ValidationErrors(err)
	if len(verrs) == 0 {
		diags.AddError("Rendering the seed", err.Error())
		return
	}
	for _, ve := range verrs {
		// The path leads the detail too: inside lists of objects Terraform
		// can only point at the enclosing block.
		p, ok := seedAttrPath(ve.Path)
		where := ve.Path
		if ok {
			where = p.String()
		}
		detail := where + ": " + ve.Problem
		if ve.Example != "" {
			detail += ". For example: " + ve.Example
		}
		if ve.Err != nil && !strings.Contains(detail, ve.Err.Error()) {
			detail += " (" + ve.Err.Error() + ")"
		}
		if ok {
			diags.AddAttributeError(p, "Invalid seed input", detail)
		} else {
			diags.AddError("Invalid seed input", detail)
		}
	}
}

var pathSegRE = regexp.MustCompile(`^([a-z0-9_]+)((?:\[[^\]]*\])*)$`)
var pathIdxRE = regexp.MustCompile(`\[([^\]]*)\]`)

// seedAttrPath parses "network[0].addresses[1]" or `meta_data["k"]` into a
// schema path. ok is false for paths with no attribute (e.g. "spec").
func seedAttrPath(s string) (path.Path, bool) {
	var p path.Path
	first := true
	for _, seg := range strings.Split(s, ".") {
		mm := pathSegRE.FindStringSubmatch(seg)
		if mm == nil {
			return path.Empty(), false
		}
		names := []string{mm[1]}
		if first {
			if mapped, ok := seedPathNames[mm[1]]; ok {
				names = mapped
			}
		}
		for _, n := range names {
			if first {
				p = path.Root(n)
				first = false
			} else {
				p = p.AtName(n)
			}
		}
		for _, idx := range pathIdxRE.FindAllStringSubmatch(mm[2], -1) {
			if i, err := strconv.Atoi(idx[1]); err == nil {
				p = p.AtListIndex(i)
			} else if k, err := strconv.Unquote(idx[1]); err == nil {
				p = p.AtMapKey(k)
			} else {
				return path.Empty(), false
			}
		}
	}
	if first || s == "spec" || s == "phone_home" || strings.HasPrefix(s, "phone_home.") || strings.HasPrefix(s, "public_keys") {
		return path.Empty(), false
	}
	return p, true
}

func strings_(in []types.String) []string {
	if in == nil {
		return nil
	}
	out := make([]string, 0, len(in))
	for _, v := range in {
		out = append(out, v.ValueString())
	}
	return out
}

// stringList is a known list of strings (empty, never null, for nil input).
func stringList(in []string) types.List {
	elems := make([]attr.Value, 0, len(in))
	for _, v := range in {
		elems = append(elems, types.StringValue(v))
	}
	return types.ListValueMust(types.StringType, elems)
}

func orDefaultString(v, d string) string {
	if v == "" {
		return d
	}
	return v
}
