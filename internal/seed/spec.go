package seed

// Format selects the cloud-init datasource layout of the seed.
type Format string

const (
	// FormatNoCloud is cloud-init's NoCloud layout: volume label "cidata",
	// files meta-data, user-data, vendor-data and network-config.
	FormatNoCloud Format = "nocloud"
	// FormatConfigDrive is the OpenStack ConfigDrive v2 layout: volume label
	// "config-2", files under openstack/latest/.
	FormatConfigDrive Format = "configdrive"
)

// Volume labels cloud-init looks for.
const (
	LabelNoCloud     = "cidata"
	LabelConfigDrive = "config-2"
)

// File names inside the seed, exactly as cloud-init reads them.
const (
	FileMetaData      = "meta-data"
	FileUserData      = "user-data"
	FileVendorData    = "vendor-data"
	FileNetworkConfig = "network-config"

	FileCDMetaData    = "openstack/latest/meta_data.json"
	FileCDUserData    = "openstack/latest/user_data"
	FileCDVendorData  = "openstack/latest/vendor_data.json"
	FileCDNetworkData = "openstack/latest/network_data.json"
)

// Defaults applied when the corresponding Spec field is empty.
const (
	DefaultSudo           = "ALL=(ALL) NOPASSWD:ALL"
	DefaultShell          = "/bin/bash"
	Default9PMSize        = 524288
	DefaultPhoneHomeTries = 10
	DefaultNVIDIAURL      = "https://us.download.nvidia.com/XFree86/Linux-x86_64/{version}/NVIDIA-Linux-x86_64-{version}.run"
	DefaultMergeType      = "list(prepend)+dict(no_replace,recurse_list)+str()"
	GeneratedPartFilename = "kohaku-generated.cfg"
	RootSSHDDropInPath    = "/etc/ssh/sshd_config.d/99-kohaku-root.conf"
)

// Size caps. cloud-init itself puts no limit on NoCloud or ConfigDrive
// documents read from a disk (the 16 KiB of EC2 and 64 KiB of OpenStack Nova
// are limits of those clouds' APIs, not of cloud-init); these caps keep a seed
// (held in memory several times over and possibly in Terraform state) sane and
// stop gzip bombs.
const (
	// MaxUserDataBytes caps the user's user data after base64 decoding and
	// after gzip decompression (both sizes are checked).
	MaxUserDataBytes = 16 << 20
	// MaxVendorDataBytes caps the raw vendor data.
	MaxVendorDataBytes = 16 << 20
	// MaxNetworkConfigBytes caps a raw network_config.
	MaxNetworkConfigBytes = 1 << 20
	// MaxWriteFilesBytes caps the sum of all write_files contents.
	MaxWriteFilesBytes = 16 << 20
	// MaxSeedBytes caps the sum of every rendered document.
	MaxSeedBytes = 64 << 20
	// MaxVolumeBytes caps a seed volume as stored: every rendered document
	// (MaxSeedBytes) plus the ISO9660 structures around them. It is the one
	// limit on reading a seed back: kohaku_seed checks its volume and
	// kohaku_vm reads its MACs and report token with it, so any seed that
	// could be created can be used.
	MaxVolumeBytes = MaxSeedBytes + 1<<20
)

// Spec is everything a seed is rendered from. Only plain Go types, so a
// Terraform model maps onto it field by field. The zero value of every
// optional field means "not set".
type Spec struct {
	// Name of the seed (required). It seeds the default instance id, the
	// default hostname (when it is a valid host name) and the default MACs.
	Name string
	// Format is FormatNoCloud (default when empty) or FormatConfigDrive.
	Format Format
	// InstanceID overrides the default "<name>-<12 hex of content hash>".
	InstanceID string
	// Hostname is meta-data local-hostname (ConfigDrive: hostname); defaults
	// to Name when Name is a valid host name.
	Hostname string
	// FQDN, when set, adds hostname and fqdn to the generated cloud-config.
	FQDN string
	// PublicKeys go to meta-data public-keys (ConfigDrive: public_keys),
	// which cloud-init gives to the image's default user.
	PublicKeys []string
	// MetaData holds extra meta-data keys. instance-id and local-hostname
	// (ConfigDrive also uuid, hostname, name, public_keys) are Kohaku's:
	// such keys are dropped and reported in Result.Warnings.
	MetaData map[string]string

	// User is the login user to create.
	User *User
	// Users are further accounts to create after User. Unlike User's, their
	// Sudo defaults to no rule.
	Users []User
	// Timezone is a tz database name ("Europe/Berlin"), cloud-init timezone.
	Timezone string
	// Locale is the system locale ("en_US.UTF-8"), cloud-init locale.
	Locale string
	// Packages are installed at first boot (cloud-init packages): a name,
	// or "name=version" for a version. cloud-init refreshes the package
	// index first whenever there are packages.
	Packages []string
	// PackageUpdate refreshes the package index at first boot;
	// PackageUpgrade upgrades every installed package.
	PackageUpdate, PackageUpgrade bool
	// SSHPasswordAuth sets sshd's PasswordAuthentication (cloud-init
	// ssh_pwauth); nil leaves the image's setting.
	SSHPasswordAuth *bool
	// RootAuthorizedKeys gives root the login user's SSH keys (and sets
	// disable_root: false so cloud-init does not fence them off).
	RootAuthorizedKeys bool
	// PermitRootLogin writes RootSSHDDropIn ("PermitRootLogin
	// prohibit-password") and reloads sshd. Only with RootAuthorizedKeys.
	PermitRootLogin bool

	// WriteFiles become cloud-init write_files entries.
	WriteFiles []File
	// Mounts are 9p or virtiofs shares mounted at first boot and in fstab.
	Mounts []Mount
	// NVIDIA installs the NVIDIA driver from the .run installer.
	NVIDIA *NVIDIA
	// QEMUGuestAgent enables and starts qemu-guest-agent (QEMUGuestAgentCommands).
	QEMUGuestAgent bool
	// PhoneHome configures cloud-init's phone_home module.
	PhoneHome *PhoneHome
	// ReportChannel installs the first-boot reporter even without a
	// phone-home URL: after cloud-init's last stage it writes its report
	// to the org.kohaku.report.0 virtio-serial port, which kohaku_vm reads
	// through libvirt. The report carries PhoneHome.Token when there is one,
	// else DerivedReportToken.
	ReportChannel bool
	// HeartbeatSeconds keeps the reporter running after its report as the
	// guest's health agent, writing a heartbeat to the report channel at
	// once when a reader opens it and then every HeartbeatSeconds while one
	// stays (internal/health reads them). 0: no agent. Needs ReportChannel.
	HeartbeatSeconds int
	// reportToken overrides the reporter's token (while deriving it).
	reportToken string

	// Network is the structured network configuration (one entry per NIC).
	Network []NIC
	// NetworkConfig is a raw network configuration used verbatim instead of
	// Network: netplan-style YAML (v1 or v2) for NoCloud, network_data.json
	// for ConfigDrive. Conflicts with Network.
	NetworkConfig []byte

	// UserData is the user's raw user data (plain text, gzip, or MIME
	// multipart, possibly gzip-compressed). Conflicts with UserDataBase64.
	UserData []byte
	// UserDataBase64 is user data encoded with standard base64, as produced
	// by the cloudinit_config data source (gzip+base64 by default).
	UserDataBase64 string
	// VendorData is raw vendor data, written as is (ConfigDrive: wrapped in
	// vendor_data.json as {"cloud-init": "<vendor data>"}).
	VendorData []byte
}

// User is a login user created through cloud-init's users module.
type User struct {
	// Name of the account (required).
	Name string
	// Sudo rule; nil means DefaultSudo, a pointer to "" means no sudo rule.
	Sudo *string
	// Shell; empty means DefaultShell.
	Shell string
	// LockPassword locks the password; nil means true.
	LockPassword *bool
	// Groups are supplementary groups.
	Groups []string
	// SSHAuthorizedKeys for the account.
	SSHAuthorizedKeys []string
	// PasswordHash is a crypt(3) hash ("$6$...", "$y$...", as mkpasswd
	// prints it), applied even to an account that exists (cloud-init
	// hashed_passwd). It unlocks the password unless LockPassword says
	// otherwise.
	PasswordHash string
}

// File is one write_files entry.
type File struct {
	// Path in the guest (absolute, required).
	Path string
	// Content is written as is; non-UTF-8 or control bytes are sent base64
	// encoded (encoding: b64).
	Content []byte
	// Permissions as an octal string such as "0644"; empty leaves cloud-init's default.
	Permissions string
	// Owner as "user:group"; empty leaves cloud-init's default (root:root).
	Owner string
	// Append instead of overwrite.
	Append bool
	// Defer writing to the final stage, after users exist. Set
	// automatically when Owner names the login user.
	Defer bool
}

// MountType is the kind of shared folder.
type MountType string

// The shared folder kinds a guest mounts.
const (
	Mount9P       MountType = "9p"
	MountVirtioFS MountType = "virtiofs"
)

// Mount is a host share mounted in the guest.
type Mount struct {
	// Type is Mount9P or MountVirtioFS.
	Type MountType
	// Tag is the mount tag the host exports (the libvirt <target dir>).
	Tag string
	// Path is the mount point in the guest (absolute).
	Path string
	// ReadOnly mounts with "ro".
	ReadOnly bool
	// MSize is the 9p msize; 0 means Default9PMSize. 9p only.
	MSize int
}

// NVIDIA describes a driver installation from NVIDIA's .run installer.
type NVIDIA struct {
	// Version such as "550.54.14" (required).
	Version string
	// URLTemplate with {version} placeholders; empty means DefaultNVIDIAURL.
	// It must be https (the download refuses plain http, redirects too),
	// or plain http with SHA256 set.
	URLTemplate string
	// SHA256 is the installer's expected SHA-256 in hex; when set, the
	// guest checks the download against it before running it.
	SHA256 string
}

// PhoneHome configures cloud-init's phone_home module.
type PhoneHome struct {
	// URL receives a form-encoded POST (http or https; $INSTANCE_ID is
	// substituted by cloud-init).
	URL string
	// Tries; 0 means DefaultPhoneHomeTries.
	Tries int
	// Reporter installs Kohaku's first-boot reporter instead of using
	// cloud-init's phone_home module: after cloud-init's last stage it posts
	// a JSON report with cloud-init's own status and errors, host keys,
	// addresses and GPUs to URL (and writes it to the Kohaku virtio-serial
	// port when there is one). Token goes into the report so a report that
	// arrives over a channel can be matched to its seed.
	Reporter bool
	Token    string
}

// NIC is one network interface, matched by MAC address.
type NIC struct {
	// ID is the netplan ethernets key and ConfigDrive link id; empty means
	// "nic<index>".
	ID string
	// MAC address; empty means DefaultMAC(spec.Name, index).
	MAC string
	// SetName renames the interface (netplan set-name).
	SetName string
	// DHCP4 and DHCP6 enable DHCP for each family.
	DHCP4 bool
	DHCP6 bool
	// Addresses in CIDR notation, IPv4 or IPv6 ("10.0.2.15/24", "2001:db8::5/64").
	Addresses []string
	// Gateway4 and Gateway6 are default gateways; each must lie inside one
	// of this NIC's subnets of its family (an IPv6 link-local gateway is
	// also accepted).
	Gateway4 string
	Gateway6 string
	// Nameservers are DNS server addresses; SearchDomains DNS search domains.
	Nameservers   []string
	SearchDomains []string
}

// Result is everything Render produces.
type Result struct {
	// Format and Label of the seed volume.
	Format Format
	Label  string
	// Files maps each file name inside the ISO (e.g. "meta-data" or
	// "openstack/latest/meta_data.json") to its bytes.
	Files map[string][]byte
	// ISO is the image; ISOSHA256 its lower-case hex sha256.
	ISO       []byte
	ISOSHA256 string
	// InstanceID as written into the meta-data.
	InstanceID string
	// MACs of the structured NICs, in order (empty with a raw NetworkConfig).
	MACs []string
	// UserDataMerged reports that the user's data was combined with the
	// generated cloud-config into one MIME multipart document.
	UserDataMerged bool
	// Warnings are non-fatal notes (e.g. meta-data keys that were dropped).
	Warnings []string
}

// DefaultHeartbeatSeconds is kohaku_seed's heartbeat interval by default,
// and MaxHeartbeatSeconds the longest a seed accepts.
const (
	DefaultHeartbeatSeconds = 10
	MaxHeartbeatSeconds     = 3600
)
