package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// The seed resource's model: the plain structs with tfsdk tags that
// kohaku_seed's plan, state and config are read into.

type seedResourceModel struct {
	ID              types.String       `tfsdk:"id"`
	Host            types.String       `tfsdk:"host"`
	Name            types.String       `tfsdk:"name"`
	Pool            types.String       `tfsdk:"pool"`
	Format          types.String       `tfsdk:"format"`
	InstanceID      types.String       `tfsdk:"instance_id"`
	Hostname        types.String       `tfsdk:"hostname"`
	FQDN            types.String       `tfsdk:"fqdn"`
	MetaData        map[string]string  `tfsdk:"meta_data"`
	User            *seedUserModel     `tfsdk:"user"`
	Users           []seedAccountModel `tfsdk:"users"`
	Timezone        types.String       `tfsdk:"timezone"`
	Locale          types.String       `tfsdk:"locale"`
	Packages        []types.String     `tfsdk:"packages"`
	PackageUpdate   types.Bool         `tfsdk:"package_update"`
	PackageUpgrade  types.Bool         `tfsdk:"package_upgrade"`
	SSHPasswordAuth types.Bool         `tfsdk:"ssh_pwauth"`
	WriteFiles      []seedFileModel    `tfsdk:"write_files"`
	SharedFolders   []seedMountModel   `tfsdk:"shared_folders"`
	NVIDIA          *seedNVIDIAModel   `tfsdk:"nvidia_driver"`
	GuestAgent      types.Bool         `tfsdk:"guest_agent"`
	Network         []seedNetworkModel `tfsdk:"network"`
	NetworkConfig   types.String       `tfsdk:"network_config"`
	UserData        types.String       `tfsdk:"user_data"`
	UserDataBase64  types.String       `tfsdk:"user_data_base64"`
	UserDataWO      types.String       `tfsdk:"user_data_wo"`
	VendorData      types.String       `tfsdk:"vendor_data"`
	PhoneHome       types.Bool         `tfsdk:"phone_home"`
	PhoneHomeAgent  types.Bool         `tfsdk:"phone_home_reporter"`
	PhoneHomeURL    types.String       `tfsdk:"phone_home_url"`
	ReportChannel   types.Bool         `tfsdk:"report_channel"`
	Heartbeat       types.Int64        `tfsdk:"heartbeat_interval"`

	VolumeKey             types.String `tfsdk:"volume_key"`
	VolumePath            types.String `tfsdk:"volume_path"`
	SizeBytes             types.Int64  `tfsdk:"size_bytes"`
	SHA256                types.String `tfsdk:"sha256"`
	MACs                  types.List   `tfsdk:"macs"`
	RenderedMetaData      types.String `tfsdk:"rendered_meta_data"`
	UserDataSHA256        types.String `tfsdk:"user_data_sha256"`
	RenderedNetworkConfig types.String `tfsdk:"rendered_network_config"`
	RenderedVendorData    types.String `tfsdk:"rendered_vendor_data"`
}

// seedUserModel is the login user: an account with root's keys.
type seedUserModel struct {
	seedAccountModel
	RootAuthorizedKeys types.Bool `tfsdk:"root_authorized_keys"`
	PermitRootLogin    types.Bool `tfsdk:"permit_root_login"`
}

// seedAccountModel is one entry of users, and the account part of user.
type seedAccountModel struct {
	Name              types.String   `tfsdk:"name"`
	Sudo              types.String   `tfsdk:"sudo"`
	Shell             types.String   `tfsdk:"shell"`
	LockPassword      types.Bool     `tfsdk:"lock_password"`
	Groups            []types.String `tfsdk:"groups"`
	SSHAuthorizedKeys []types.String `tfsdk:"ssh_authorized_keys"`
	PasswordHash      types.String   `tfsdk:"password_hash"`
	PasswordHashWO    types.String   `tfsdk:"password_hash_wo"`
}

// account is the seed's account; wo, the write-only hash from the
// configuration, wins over the stored one.
func (a *seedAccountModel) account(wo types.String) seed.User {
	u := seed.User{
		Name:              a.Name.ValueString(),
		Shell:             a.Shell.ValueString(),
		Groups:            stringValues(a.Groups),
		SSHAuthorizedKeys: stringValues(a.SSHAuthorizedKeys),
		PasswordHash:      a.PasswordHash.ValueString(),
	}
	if !wo.IsNull() && !wo.IsUnknown() {
		u.PasswordHash = wo.ValueString()
	}
	if !a.Sudo.IsNull() {
		v := a.Sudo.ValueString()
		u.Sudo = &v
	}
	if !a.LockPassword.IsNull() {
		v := a.LockPassword.ValueBool()
		u.LockPassword = &v
	}
	return u
}

// writeOnlyIn reports whether cfg carries any write-only value that ends
// up in the user data (so not even a digest of it goes into state).
func writeOnlyIn(cfg *seedResourceModel) bool {
	if !cfg.UserDataWO.IsNull() {
		return true
	}
	if u := cfg.User; u != nil && !u.PasswordHashWO.IsNull() {
		return true
	}
	for _, a := range cfg.Users {
		if !a.PasswordHashWO.IsNull() {
			return true
		}
	}
	return false
}

type seedFileModel struct {
	Path          types.String `tfsdk:"path"`
	Content       types.String `tfsdk:"content"`
	ContentBase64 types.String `tfsdk:"content_base64"`
	Permissions   types.String `tfsdk:"permissions"`
	Owner         types.String `tfsdk:"owner"`
	Append        types.Bool   `tfsdk:"append"`
}

// seedMountModel is one of shared_folders. type and readonly are the
// deprecated names of driver and read_only; at most one of each pair is set.
type seedMountModel struct {
	Driver      types.String `tfsdk:"driver"`
	Type        types.String `tfsdk:"type"`
	Tag         types.String `tfsdk:"tag"`
	Path        types.String `tfsdk:"path"`
	ReadOnly    types.Bool   `tfsdk:"read_only"`
	ReadOnlyOld types.Bool   `tfsdk:"readonly"`
	MSize       types.Int64  `tfsdk:"msize"`
}

// mount is the folder for the seed package, from whichever name was set.
func (mt *seedMountModel) mount() seed.Mount {
	driver, readOnly := mt.Driver, mt.ReadOnly
	if driver.IsNull() {
		driver = mt.Type
	}
	if readOnly.IsNull() {
		readOnly = mt.ReadOnlyOld
	}
	return seed.Mount{
		Type:     seed.MountType(orDefaultString(driver.ValueString(), string(seed.Mount9P))),
		Tag:      mt.Tag.ValueString(),
		Path:     mt.Path.ValueString(),
		ReadOnly: readOnly.ValueBool(),
		MSize:    int(mt.MSize.ValueInt64()),
	}
}

type seedNVIDIAModel struct {
	Version     types.String `tfsdk:"version"`
	URLTemplate types.String `tfsdk:"url_template"`
	SHA256      types.String `tfsdk:"sha256"`
}

type seedNetworkModel struct {
	ID            types.String   `tfsdk:"id"`
	MAC           types.String   `tfsdk:"mac"`
	SetName       types.String   `tfsdk:"set_name"`
	DHCP4         types.Bool     `tfsdk:"dhcp4"`
	DHCP6         types.Bool     `tfsdk:"dhcp6"`
	Addresses     []types.String `tfsdk:"addresses"`
	Gateway4      types.String   `tfsdk:"gateway4"`
	Gateway6      types.String   `tfsdk:"gateway6"`
	Nameservers   []types.String `tfsdk:"nameservers"`
	SearchDomains []types.String `tfsdk:"search_domains"`
}

// volumeNameRE is what Kohaku accepts as a volume name: safe as a file name
// in a dir pool and in an import ID.
var volumeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`)

func configValidatorAtMostOneOf(paths ...path.Expression) resource.ConfigValidator {
	return resourcevalidator.Conflicting(paths...)
}

// placeholderPhoneHomeURL stands in for the real URL when only validating.
const placeholderPhoneHomeURL = "http://phone-home.invalid:8787/v1/phone-home/validation-placeholder-token-000000000000"

// spec translates the model into the seed package's input. cfg is the
// configuration, the only place write-only values (user_data_wo, the
// password_hash_wo of user and users) are found, and only during plan and
// apply; m itself when m is the configuration. phURL is the phone-home URL,
// used when phone_home is on.
func (m *seedResourceModel) spec(cfg *seedResourceModel, phURL string) (*seed.Spec, diag.Diagnostics) {
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
	s.HeartbeatSeconds = seed.DefaultHeartbeatSeconds
	if !m.Heartbeat.IsNull() && !m.Heartbeat.IsUnknown() {
		s.HeartbeatSeconds = int(m.Heartbeat.ValueInt64())
	}
	if !cfg.UserDataWO.IsNull() {
		s.UserData = []byte(cfg.UserDataWO.ValueString())
	}
	if m.PhoneHome.ValueBool() && phURL != "" {
		s.PhoneHome = &seed.PhoneHome{URL: phURL}
		if m.PhoneHomeAgent.IsNull() || m.PhoneHomeAgent.ValueBool() {
			s.PhoneHome.Reporter = true
			s.PhoneHome.Token = phonehome.TokenOf(phURL)
		}
	}
	if u := m.User; u != nil {
		wo := types.StringNull()
		if cfg.User != nil {
			wo = cfg.User.PasswordHashWO
		}
		a := u.account(wo)
		s.User = &a
		s.RootAuthorizedKeys = u.RootAuthorizedKeys.ValueBool()
		s.PermitRootLogin = u.PermitRootLogin.ValueBool()
	}
	for i, a := range m.Users {
		wo := types.StringNull()
		if i < len(cfg.Users) {
			wo = cfg.Users[i].PasswordHashWO
		}
		s.Users = append(s.Users, a.account(wo))
	}
	s.Timezone, s.Locale = m.Timezone.ValueString(), m.Locale.ValueString()
	s.Packages = stringValues(m.Packages)
	s.PackageUpdate, s.PackageUpgrade = m.PackageUpdate.ValueBool(), m.PackageUpgrade.ValueBool()
	if !m.SSHPasswordAuth.IsNull() {
		v := m.SSHPasswordAuth.ValueBool()
		s.SSHPasswordAuth = &v
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
				diags.AddAttributeError(configLine(path.Root("write_files").AtListIndex(i).AtName("content_base64")),
					"Invalid base64", fmt.Sprintf("write_files[%d].content_base64 is not standard base64: %v. "+
						"For example: filebase64(\"${path.module}/blob.bin\").", i, err))
			}
			file.Content = b
		default:
			file.Content = []byte(f.Content.ValueString())
		}
		s.WriteFiles = append(s.WriteFiles, file)
	}
	for i := range m.SharedFolders {
		s.Mounts = append(s.Mounts, m.SharedFolders[i].mount())
	}
	if n := m.NVIDIA; n != nil {
		s.NVIDIA = &seed.NVIDIA{Version: n.Version.ValueString(), URLTemplate: n.URLTemplate.ValueString(), SHA256: n.SHA256.ValueString()}
	}
	for _, n := range m.Network {
		s.Network = append(s.Network, seed.NIC{
			ID:            n.ID.ValueString(),
			MAC:           n.MAC.ValueString(),
			SetName:       n.SetName.ValueString(),
			DHCP4:         n.DHCP4.ValueBool(),
			DHCP6:         n.DHCP6.ValueBool(),
			Addresses:     stringValues(n.Addresses),
			Gateway4:      n.Gateway4.ValueString(),
			Gateway6:      n.Gateway6.ValueString(),
			Nameservers:   stringValues(n.Nameservers),
			SearchDomains: stringValues(n.SearchDomains),
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
	m.RenderedNetworkConfig = nullIfNone(string(res.Files[networkFile(res.Format)]))
	m.RenderedVendorData = nullIfNone(string(res.Files[vendorDataFile(res.Format)]))
	if writeOnly {
		m.UserDataSHA256 = types.StringNull()
	} else {
		m.UserDataSHA256 = digestIfAny(res.Files[userDataFile(res.Format)])
	}
}

// digestIfAny is the lower-case hex SHA-256 of a document, null when the
// seed has none (or an empty one).
func digestIfAny(doc []byte) types.String {
	if len(doc) == 0 {
		return types.StringNull()
	}
	sum := sha256.Sum256(doc)
	return types.StringValue(hex.EncodeToString(sum[:]))
}

// nullIfNone is null for a document or URL the seed does not have. Null,
// not "": Terraform lists an empty string in every create plan, and as
// "(sensitive value)" with a sensitivity notice for sensitive attributes,
// although there is nothing to see.
func nullIfNone(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// dropEmptyDocuments turns the "" that earlier versions stored for a
// missing document or URL into null, so a refresh of such a state plans no
// change when the plan computes null.
func (m *seedResourceModel) dropEmptyDocuments() {
	for _, v := range []*types.String{&m.PhoneHomeURL, &m.RenderedNetworkConfig, &m.RenderedVendorData} {
		if !v.IsUnknown() && v.ValueString() == "" {
			*v = types.StringNull()
		}
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

func stringValues(in []types.String) []string {
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
