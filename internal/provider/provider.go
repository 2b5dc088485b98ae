// Package provider is Kohaku's Terraform layer: schemas, validation and the
// translation between Terraform values and the plain packages that do the work.
package provider

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/image"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
)

// defaultImageCacheGiB bounds the image cache unless image_cache_max_gib says otherwise.
const defaultImageCacheGiB = 20

var _ provider.Provider = (*kohakuProvider)(nil)

// New returns a constructor for the provider at the given version, whose
// hosts' connections connect makes (main gives it libvirthost.Connect).
func New(version string, connect hosts.Connect) func() provider.Provider {
	return func() provider.Provider { return &kohakuProvider{version: version, connect: connect} }
}

type kohakuProvider struct {
	version string
	connect hosts.Connect
}

type providerModel struct {
	URI         types.String         `tfsdk:"uri"`
	DialTimeout types.String         `tfsdk:"dial_timeout"`
	CallTimeout types.String         `tfsdk:"call_timeout"`
	SSH         *sshModel            `tfsdk:"ssh"`
	TLS         *tlsModel            `tfsdk:"tls"`
	Hosts       map[string]hostModel `tfsdk:"hosts"`
	PhoneHome   *phoneHomeModel      `tfsdk:"phone_home"`
	ImageCache  types.String         `tfsdk:"image_cache_dir"`
	ImageMaxGiB types.Int64          `tfsdk:"image_cache_max_gib"`
	GPUHealth   *gpuHealthModel      `tfsdk:"gpu_health_check"`
	Drain       types.Bool           `tfsdk:"drain"`
}

type hostModel struct {
	URI       types.String    `tfsdk:"uri"`
	SSH       *sshModel       `tfsdk:"ssh"`
	TLS       *tlsModel       `tfsdk:"tls"`
	GPUHealth *gpuHealthModel `tfsdk:"gpu_health_check"`
	Drain     types.Bool      `tfsdk:"drain"`
}

type sshModel struct {
	KeyFile          types.String `tfsdk:"key_file"`
	KnownHostsFile   types.String `tfsdk:"known_hosts_file"`
	KnownHostsVerify types.String `tfsdk:"known_hosts_verify"`
	UseAgent         types.Bool   `tfsdk:"use_agent"`
	Password         types.String `tfsdk:"password"`
	PrivateKey       types.String `tfsdk:"private_key"`
	KeyPassphrase    types.String `tfsdk:"private_key_passphrase"`
	HostKey          types.String `tfsdk:"host_key"`
}

type tlsModel struct {
	PKIPath    types.String `tfsdk:"pki_path"`
	NoVerify   types.Bool   `tfsdk:"no_verify"`
	CACert     types.String `tfsdk:"ca_cert"`
	ClientCert types.String `tfsdk:"client_cert"`
	ClientKey  types.String `tfsdk:"client_key"`
}

// providerData is what Configure hands to every resource and data source.
type providerData struct {
	fleet *hosts.Fleet
	// phoneHome is nil when the provider has no phone_home block.
	phoneHome *phoneHome
	// images caches kohaku_image downloads on the Terraform machine.
	images *image.Cache
	// placer places the VMs that ask for capacity, reading each host once
	// per provider process (one plan, or one apply); made on first use.
	placerOnce sync.Once
	placer     *placement.Shared
	// health is each host's GPU health check ("" the default host); a
	// host without one is absent.
	health map[string]*gpuHealth
	// drain holds the hosts drained for maintenance ("" the default).
	drain map[string]bool
}

func (p *kohakuProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "kohaku"
	resp.Version = p.version
}

func sshSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		Description: "Options for the `ssh` transport (`qemu+ssh://user@host/system`). Kohaku speaks SSH " +
			"in-process and reaches libvirt's unix socket on the host through the SSH connection: no `ssh` " +
			"binary, `nc` or `virt-ssh-helper` is needed. Values here win over the URI's `keyfile`, " +
			"`known_hosts` and `known_hosts_verify` parameters. " +
			"For runs with no files on disk (Terraform Cloud), give `private_key` and `host_key` as values; " + sshEnvNote,
		Attributes: map[string]schema.Attribute{
			"key_file": schema.StringAttribute{
				Optional: true,
				Description: "Private key file to offer. Default: the `~/.ssh/id_ed25519`, `id_ecdsa` and " +
					"`id_rsa` files that exist. Keys protected by a passphrase must be loaded into ssh-agent, " +
					"or given as `private_key` with `private_key_passphrase`. Conflicts with `private_key`.",
				Validators: []validator.String{stringvalidator.ConflictsWith(sibling("private_key"))},
			},
			"private_key": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				Description: "Private key to offer, as text (OpenSSH or PEM format, e.g. " +
					"`file(\"~/.ssh/id_ed25519\")` or a sensitive variable). It is used instead of any key " +
					"file, is never logged, and is not stored in state. Default: the `KOHAKU_SSH_PRIVATE_KEY` " +
					"environment variable (default host only, when neither `private_key` nor `key_file` is " +
					"set). Conflicts with `key_file`.",
				Validators: []validator.String{stringvalidator.ConflictsWith(sibling("key_file")), stringvalidator.LengthAtLeast(1)},
			},
			"private_key_passphrase": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				Description: "Passphrase of an encrypted `private_key`. Default: the " +
					"`KOHAKU_SSH_PRIVATE_KEY_PASSPHRASE` environment variable (default host only). Requires " +
					"`private_key` (or `KOHAKU_SSH_PRIVATE_KEY`).",
			},
			"host_key": schema.StringAttribute{
				Optional: true,
				Description: "The host's SSH public key, pinned: a line like `ssh-ed25519 AAAAC3Nz...` (the " +
					"host's `/etc/ssh/ssh_host_ed25519_key.pub`) or known_hosts lines (the output of " +
					"`ssh-keyscan`); any key given is accepted for this host and every other key is refused " +
					"with the fingerprint seen. No known_hosts file is read or written. Default: the " +
					"`KOHAKU_SSH_HOST_KEY` environment variable (default host only, when none of `host_key`, " +
					"`known_hosts_file` and `known_hosts_verify` is set). Conflicts with `known_hosts_file` and " +
					"`known_hosts_verify`.",
				Validators: []validator.String{
					stringvalidator.ConflictsWith(sibling("known_hosts_file"), sibling("known_hosts_verify")),
					stringvalidator.LengthAtLeast(1),
				},
			},
			"known_hosts_file": schema.StringAttribute{
				Optional: true,
				Description: "known_hosts file the host's key is checked against. Default `~/.ssh/known_hosts`. " +
					"As OpenSSH's client does, Kohaku asks the server for a key of a type the file (or " +
					"`host_key`) holds for the host, so a file with only the host's ed25519 line (`ssh-keyscan " +
					"-t ed25519`) works with a server that also has ECDSA and RSA keys. Conflicts with " +
					"`host_key`.",
			},
			"known_hosts_verify": schema.StringAttribute{
				Optional: true,
				Description: "How the host key is checked: `normal` (default) refuses a host that is not in " +
					"known_hosts and says which line to add; `auto` trusts a host on first use and records its " +
					"key; `ignore` skips the check (insecure: only for throwaway hosts). A key that differs " +
					"from the recorded one is always refused. Conflicts with `host_key`.",
				Validators: []validator.String{stringvalidator.OneOf(hosts.HostKeyNormal, hosts.HostKeyAuto, hosts.HostKeyIgnore)},
			},
			"use_agent": schema.BoolAttribute{
				Optional:    true,
				Description: "Offer the keys of the ssh-agent at `SSH_AUTH_SOCK`. Default `true`.",
			},
			"password": schema.StringAttribute{
				Optional:    true,
				Sensitive:   true,
				Description: "Password tried after keys. Prefer keys; a password is never logged.",
			},
		},
	}
}

func tlsSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		Description: "Options for the `tls` transport (`qemu+tls://host/system`). Values here win over the URI's `pkipath` and `no_verify` parameters. " +
			"The TCP connect, the TLS handshake and libvirtd's check of the client certificate are all bounded by `dial_timeout`; a failure says which side refused which certificate. " +
			"For runs with no files on disk (Terraform Cloud), give `ca_cert`, `client_cert` and `client_key` " +
			"as values; " + tlsEnvNote,
		Attributes: map[string]schema.Attribute{
			"pki_path": schema.StringAttribute{
				Optional: true,
				Description: "Directory with `cacert.pem`, `clientcert.pem` and `clientkey.pem`. Default: " +
					"`~/.pki/libvirt`, then `/etc/pki/libvirt` and `/etc/pki/CA`, as libvirt's own client " +
					"looks. Conflicts with `ca_cert`, `client_cert` and `client_key`.",
			},
			"no_verify": schema.BoolAttribute{
				Optional:    true,
				Description: "Skip verification of the server certificate (insecure). Default `false`. Conflicts with `ca_cert`.",
			},
			"ca_cert": schema.StringAttribute{
				Optional: true,
				Description: "PEM text of the CA certificate that signed libvirtd's server certificate (what " +
					"`cacert.pem` holds), used instead of any file. Default: the `KOHAKU_TLS_CA_CERT` " +
					"environment variable (default host only, when neither `ca_cert`, `pki_path` nor " +
					"`no_verify` is set). Conflicts with `pki_path` and `no_verify`.",
				Validators: []validator.String{stringvalidator.ConflictsWith(sibling("pki_path"), sibling("no_verify")), stringvalidator.LengthAtLeast(1)},
			},
			"client_cert": schema.StringAttribute{
				Optional: true,
				Description: "PEM text of the client certificate libvirtd checks (what `clientcert.pem` holds), " +
					"used instead of any file. Default: the `KOHAKU_TLS_CLIENT_CERT` environment variable " +
					"(default host only, when neither `client_cert` nor `pki_path` is set). Requires " +
					"`client_key`; conflicts with `pki_path`.",
				Validators: []validator.String{
					stringvalidator.ConflictsWith(sibling("pki_path")),
					stringvalidator.AlsoRequires(sibling("client_key")),
					stringvalidator.LengthAtLeast(1),
				},
			},
			"client_key": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				Description: "PEM text of the client certificate's private key (what `clientkey.pem` holds), " +
					"used instead of any file; never logged and not stored in state. Default: the " +
					"`KOHAKU_TLS_CLIENT_KEY` environment variable (default host only, when neither `client_key` " +
					"nor `pki_path` is set). Requires `client_cert`; conflicts with `pki_path`.",
				Validators: []validator.String{
					stringvalidator.ConflictsWith(sibling("pki_path")),
					stringvalidator.AlsoRequires(sibling("client_cert")),
					stringvalidator.LengthAtLeast(1),
				},
			},
		},
	}
}

func (p *kohakuProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Kohaku turns a libvirt host, or a fleet of them, into a small GPU cloud: cloud-init seeds, VMs that are ready when apply returns, and GPUs bound to VFIO.",
		Attributes: map[string]schema.Attribute{
			"uri": schema.StringAttribute{
				Optional: true,
				Description: "libvirt connection URI of the default host, e.g. `qemu:///system`, " +
					"`qemu+ssh://root@gpu1.example.com/system`, `qemu+tcp://10.0.0.5/system` or " +
					"`qemu+tls://gpu1.example.com/system`. " +
					"Default: the `KOHAKU_URI` environment variable, then `LIBVIRT_DEFAULT_URI`, then `qemu:///system`. " +
					"Transports: `unix` (local socket; `?socket=` picks another path; `qemu:///session` uses " +
					"the per-user daemon), `tcp`, `tls` and `ssh` (also spelled `libssh`/`libssh2`). The " +
					"connection is opened on first use, shared by every resource on the host, and " +
					"re-established if it is lost.",
			},
			"dial_timeout": schema.StringAttribute{
				Optional:    true,
				Description: "How long to wait for a host to accept the connection and the libvirt handshake, as a Go duration. Default `15s`.",
				Validators:  []validator.String{positiveDuration},
			},
			"call_timeout": schema.StringAttribute{
				Optional: true,
				Description: "Deadline of each single libvirt call, as a Go duration. A call that exceeds it " +
					"means the daemon is hung: the operation fails with an error naming the host, and the " +
					"connection is re-established on the next call. Default `2m`. Long waits (a VM becoming " +
					"ready) are bounded by the resource's own timeouts instead.",
				Validators: []validator.String{positiveDuration},
			},
			"ssh":        sshSchema(),
			"tls":        tlsSchema(),
			"phone_home": phoneHomeSchema(),
			"image_cache_dir": schema.StringAttribute{
				Optional: true,
				Description: "Directory on the machine running Terraform where `kohaku_image` keeps downloaded images, by digest, so one download serves every host and every later apply. " +
					"Default `$KOHAKU_IMAGE_CACHE_DIR`, else the user's cache directory (`~/.cache/kohaku/images` on Linux). Several provider processes may share it: one downloads, the others wait.",
			},
			"image_cache_max_gib": schema.Int64Attribute{
				Optional:    true,
				Description: "Size bound of the image cache in GiB; least recently used images are evicted past it (never one in use). Default `20`; `0` means unbounded.",
				Validators:  []validator.Int64{int64validator.AtLeast(0)},
			},
			"gpu_health_check": gpuHealthSchema(),
			"drain":            drainSchema(),
			"hosts": schema.MapNestedAttribute{
				Optional: true,
				Description: "Further libvirt hosts, by a name of your choice. Resources and data sources " +
					"choose one with their `host` argument (so `for_each` can spread VMs over hosts); an empty " +
					"`host` means the default connection above. Each host's connection is opened on first use, " +
					"and a host that is down fails only the resources placed on it. `dial_timeout` and " +
					"`call_timeout` apply to every host.",
				NestedObject: schema.NestedAttributeObject{
					Attributes: map[string]schema.Attribute{
						"uri": schema.StringAttribute{
							Required:    true,
							Description: "libvirt connection URI of this host, in the same forms as the provider's `uri`.",
						},
						"ssh":              sshSchema(),
						"tls":              tlsSchema(),
						"gpu_health_check": gpuHealthSchema(),
						"drain":            drainSchema(),
					},
				},
			},
		},
	}
}

func drainSchema() schema.BoolAttribute {
	return schema.BoolAttribute{
		Optional: true,
		Description: "Drain the host for maintenance: placement (`kohaku_vm.placement`) chooses it for no new " +
			"VM, and each VM placement put there moves at the next apply to the first host by name, among the " +
			"others its placement allows, that fits it, " +
			"every move listed in the plan as a change of `host` with a warning saying why (a cold move: clean " +
			"shutdown, disks copied, restart there). A placed VM that cannot move (GPUs or other devices passed " +
			"through, disks Kohaku did not make, `numa_local` or `pin_cpus`, `host_change = \"replace\"`, or no " +
			"other host with room) stays, with a warning naming why. VMs that name their `host` are never moved: " +
			"change their `host` yourself. `data.kohaku_capacity` shows the host as `drained`. Default `false`; " +
			"setting it back stops the drain and moves nothing back.",
	}
}

// defaultURI resolves the default host's URI the way the docs promise.
func defaultURI(configured types.String) string {
	if v := configured.ValueString(); v != "" {
		return v
	}
	for _, env := range []string{"KOHAKU_URI", "LIBVIRT_DEFAULT_URI"} {
		if v := os.Getenv(env); v != "" {
			return v
		}
	}
	return "qemu:///system"
}

func (m *sshModel) settings() hosts.SSHSettings {
	if m == nil {
		return hosts.SSHSettings{}
	}
	return hosts.SSHSettings{
		KeyFile:              m.KeyFile.ValueString(),
		KnownHostsFile:       m.KnownHostsFile.ValueString(),
		KnownHostsVerify:     m.KnownHostsVerify.ValueString(),
		DisableAgent:         !m.UseAgent.IsNull() && !m.UseAgent.ValueBool(),
		Password:             m.Password.ValueString(),
		PrivateKey:           m.PrivateKey.ValueString(),
		PrivateKeyPassphrase: m.KeyPassphrase.ValueString(),
		HostKey:              m.HostKey.ValueString(),
	}
}

func (m *tlsModel) settings() hosts.TLSSettings {
	if m == nil {
		return hosts.TLSSettings{}
	}
	return hosts.TLSSettings{
		PKIPath: m.PKIPath.ValueString(), NoVerify: m.NoVerify.ValueBool(), NoVerifySet: !m.NoVerify.IsNull(),
		CACert: m.CACert.ValueString(), ClientCert: m.ClientCert.ValueString(), ClientKey: m.ClientKey.ValueString(),
	}
}

func (p *kohakuProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if cfg.URI.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("uri"), "Provider URI is not known yet",
			"The provider's uri depends on a value that is only known after apply. Kohaku needs the URI to plan; set it from a variable or a value known at plan time.")
		return
	}
	src := envSources{}
	cfg.SSH, cfg.TLS = src.ssh(cfg.SSH), src.tls(cfg.TLS)
	resp.Diagnostics.Append(checkCredentials(&cfg, src)...)
	if resp.Diagnostics.HasError() {
		return
	}
	dial, _ := time.ParseDuration(cfg.DialTimeout.ValueString())
	call, _ := time.ParseDuration(cfg.CallTimeout.ValueString())
	def := hosts.Settings{
		URI:         defaultURI(cfg.URI),
		DialTimeout: dial,
		CallTimeout: call,
		SSH:         cfg.SSH.settings(),
		TLS:         cfg.TLS.settings(),
	}
	named := map[string]hosts.Settings{}
	for name, h := range cfg.Hosts {
		named[name] = hosts.Settings{
			URI:         h.URI.ValueString(),
			DialTimeout: dial,
			CallTimeout: call,
			SSH:         h.SSH.settings(),
			TLS:         h.TLS.settings(),
		}
	}
	fleet, err := hosts.NewFleet(p.connect, def, named)
	if err != nil {
		resp.Diagnostics.AddError("Invalid libvirt connection settings", err.Error())
		return
	}
	tflog.Debug(ctx, "kohaku configured", map[string]any{
		"uri":       fleet.Default().Endpoint().Redacted(),
		"transport": fleet.Default().Endpoint().Transport,
		"hosts":     fleet.Names(),
	})
	ph, err := resolvePhoneHome(cfg.PhoneHome)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("phone_home"), "Invalid phone_home settings", err.Error())
		return
	}
	cache := &image.Cache{Dir: cfg.ImageCache.ValueString(), MaxBytes: defaultImageCacheGiB << 30}
	if cache.Dir == "" {
		cache.Dir = os.Getenv("KOHAKU_IMAGE_CACHE_DIR")
	}
	if cache.Dir == "" {
		cache.Dir = image.DefaultCacheDir()
	}
	if !cfg.ImageMaxGiB.IsNull() {
		cache.MaxBytes = cfg.ImageMaxGiB.ValueInt64() << 30
	}
	health := map[string]*gpuHealth{}
	if h := resolveGPUHealth(cfg.GPUHealth); h != nil {
		health[""] = h
	}
	for name, hm := range cfg.Hosts {
		if h := resolveGPUHealth(hm.GPUHealth); h != nil {
			health[name] = h
		}
	}
	drain := map[string]bool{}
	if cfg.Drain.ValueBool() {
		drain[""] = true
	}
	for name, hm := range cfg.Hosts {
		if hm.Drain.ValueBool() {
			drain[name] = true
		}
	}
	data := &providerData{fleet: fleet, phoneHome: ph, images: cache, health: health, drain: drain}
	resp.DataSourceData = data
	resp.ResourceData = data
	resp.ActionData = data
	resp.ListResourceData = data
}

func (p *kohakuProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		newSeedResourceWithIdentity,
		newVMResourceWithIdentity,
		newGPUBindingResourceWithIdentity,
		newImageResourceWithIdentity,
		newImageCaptureResource,
		newImageCopyResource,
		newSnapshotResourceWithIdentity,
		newBackupResourceWithIdentity,
		newMdevResourceWithIdentity,
		newGPUSRIOVResourceWithIdentity,
		newVGPUResourceWithIdentity,
		newPoolResourceWithIdentity,
		newNetworkResourceWithIdentity,
	}
}

func (p *kohakuProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		newHostDataSource,
		newCapacityDataSource,
		newPCIDevicesDataSource,
		newVMHealthDataSource,
	}
}
