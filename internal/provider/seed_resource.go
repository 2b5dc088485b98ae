package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/boolvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
	"github.com/kohaku/terraform-provider-kohaku/internal/seedlife"
	"github.com/kohaku/terraform-provider-kohaku/internal/validation"
)

var (
	_ resource.ResourceWithConfigure        = (*seedResource)(nil)
	_ resource.ResourceWithImportState      = (*seedResource)(nil)
	_ resource.ResourceWithModifyPlan       = (*seedResource)(nil)
	_ resource.ResourceWithValidateConfig   = (*seedResource)(nil)
	_ resource.ResourceWithConfigValidators = (*seedResource)(nil)
)

func newSeedResource() resource.Resource { return &seedResource{} }

type seedResource struct {
	configuredResource
}

func (r *seedResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_seed"
}

// contentChange ends the description of every attribute that goes into the
// seed's documents; the resource page's "Updates" section says, once, when a
// VM sees such a change.
const contentChange = " Changed in place (see \"Updates\")."

func (r *seedResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Version: seedSchemaVersion,
		Description: "A cloud-init seed ISO stored as a volume in a libvirt storage pool: what a VM learns on first boot. " +
			"The ISO (NoCloud `cidata` or ConfigDrive v2 `config-2`) is built in-process, byte for byte " +
			"reproducible, and uploaded through libvirt's stream API, so remote hosts work and nothing is " +
			"left in local temp directories. " +
			"Structured inputs (user, SSH keys, MAC-matched network config, shared folder mounts, NVIDIA " +
			"driver, guest agent) generate a cloud-config; your own `user_data` is never rewritten but " +
			"combined with it the way cloud-init combines MIME parts. " +
			"Everything is rendered at plan time, so the plan shows the documents and checksum that will be uploaded and bad input fails the plan.",
		Attributes: attributes(
			seedVolumeAttributes(replace, keep),
			seedGuestAttributes(),
			seedNetworkAttributes(),
			seedResultAttributes(keep),
		),
	}
}

// seedVolumeAttributes are where the seed is stored, its format and the instance it names.
func seedVolumeAttributes(replace, keep []planmodifier.String) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"id": schema.StringAttribute{
			Computed:      true,
			Description:   "`<pool>/<volume name>`. Pass it to `kohaku_vm.seed_id`.",
			PlanModifiers: keep,
		},
		"host": schema.StringAttribute{
			Optional:      true,
			Description:   "Key of the provider's `hosts` map to store the seed on; empty means the default connection. A change replaces the seed.",
			PlanModifiers: replace,
		},
		"name": schema.StringAttribute{
			Required: true,
			Description: "Volume name of the seed in the pool, e.g. `web-1-seed.iso`. It also seeds the default instance id, the default hostname (when it is a valid host name) and the default NIC MACs. " +
				"A volume of that name that Kohaku did not create is never overwritten: the create fails instead. A change replaces the seed.",
			Validators: []validator.String{
				stringvalidator.RegexMatches(volumeNameRE, "must be a volume name of letters, digits, '.', '_' and '-', such as \"web-1-seed.iso\""),
			},
			PlanModifiers: replace,
		},
		"pool": schema.StringAttribute{
			Optional: true, Computed: true,
			Default:       stringdefault.StaticString("default"),
			Description:   "Storage pool to store the seed volume in. Default `default`. A change replaces the seed.",
			PlanModifiers: replace,
		},
		"format": schema.StringAttribute{
			Optional: true, Computed: true,
			Default: stringdefault.StaticString(string(seed.FormatNoCloud)),
			Description: "`nocloud` (volume label `cidata`: `meta-data`, `user-data`, `vendor-data`, " +
				"`network-config`; the default) or `configdrive` (OpenStack ConfigDrive v2, label " +
				"`config-2`: " +
				"`openstack/latest/{meta_data.json,user_data,vendor_data.json,network_data.json}`)." + contentChange,
			Validators: []validator.String{stringvalidator.OneOf(string(seed.FormatNoCloud), string(seed.FormatConfigDrive))},
		},
		"instance_id": schema.StringAttribute{
			Optional: true, Computed: true,
			Description: "cloud-init instance id. Default `<name>-<12 hex digits of a hash of the content>`, so a content change is a new instance and cloud-init runs again on a VM booted from it.",
		},
		"hostname": schema.StringAttribute{
			Optional:    true,
			Description: "Guest hostname (meta-data `local-hostname`). Default: `name` when it is a valid host name." + contentChange,
		},
		"fqdn": schema.StringAttribute{
			Optional:    true,
			Description: "Fully qualified domain name; when set the generated cloud-config sets `hostname` and `fqdn`." + contentChange,
		},
		"meta_data": schema.MapAttribute{
			Optional: true, Sensitive: true, ElementType: types.StringType,
			Description: "Extra meta-data keys. `instance-id` and `local-hostname` (and for ConfigDrive " +
				"`uuid`, `hostname`, `name`, `public_keys`) are Kohaku's: such keys are dropped with a " +
				"warning. Sensitive: values may be secrets, so plans do not show them." + contentChange,
		},
	}
}

// seedGuestAttributes are what the generated cloud-config sets up in the guest: accounts, packages, files, shared folders, drivers.
func seedGuestAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"user": schema.SingleNestedAttribute{
			Optional:    true,
			Description: "A login user the generated cloud-config creates (cloud-init `users`)." + contentChange,
			Attributes: withAttributes(accountAttributes("kohaku", "sudo rule. Default `ALL=(ALL) NOPASSWD:ALL`; `\"\"` for none."), map[string]schema.Attribute{
				"root_authorized_keys": schema.BoolAttribute{Optional: true, Description: "Also authorize these keys for root (and keep cloud-init from fencing root off). Default `false`."},
				"permit_root_login": schema.BoolAttribute{Optional: true, Description: "Write an sshd drop-in with " +
					"`PermitRootLogin prohibit-password` (keys only). Needs `root_authorized_keys`. Default " +
					"`false`."},
			}),
		},
		"users": schema.ListNestedAttribute{
			Optional: true,
			Description: "Further accounts the generated cloud-config creates after `user` (cloud-init " +
				"`users`), each with its own keys, groups, sudo rule, shell and password. Checked at plan: " +
				"names, groups, keys and password hashes; an account declared twice is refused." + contentChange,
			NestedObject: schema.NestedAttributeObject{
				Attributes: accountAttributes("alice", "sudo rule, e.g. `ALL=(ALL) ALL`. Default: none (unlike `user`)."),
			},
		},
		"timezone": schema.StringAttribute{
			Optional: true,
			Description: "Time zone of the guest, a name of the tz database such as `Europe/Berlin` or " +
				"`UTC` (cloud-init `timezone`), checked at plan against the tz database built into the " +
				"provider." + contentChange,
		},
		"locale": schema.StringAttribute{
			Optional:    true,
			Description: "System locale such as `en_US.UTF-8` (cloud-init `locale`; the image needs the distribution's locale tools, Debian's `locales`)." + contentChange,
		},
		"packages": schema.ListAttribute{
			Optional: true, ElementType: types.StringType,
			Description: "Packages cloud-init installs at first boot with the image's package manager, each " +
				"a name or `name=version` (cloud-init `packages`). cloud-init refreshes the package index " +
				"first whenever this is set, so the guest needs a reachable package source. Listed before " +
				"`runcmd` runs and before your shell-script parts; the NVIDIA driver's build tools join " +
				"this list once each." + contentChange,
		},
		"package_update": schema.BoolAttribute{
			Optional:    true,
			Description: "Refresh the package index at first boot (cloud-init `package_update`). Default `false`." + contentChange,
		},
		"package_upgrade": schema.BoolAttribute{
			Optional:    true,
			Description: "Upgrade every installed package at first boot (cloud-init `package_upgrade`). Default `false`." + contentChange,
		},
		"ssh_pwauth": schema.BoolAttribute{
			Optional:    true,
			Description: "Allow (`true`) or refuse (`false`) SSH password logins (cloud-init `ssh_pwauth`, sshd's `PasswordAuthentication`). Unset: the image's setting." + contentChange,
		},
		"write_files": schema.ListNestedAttribute{
			Optional:    true,
			Description: "Files cloud-init writes (`write_files`). Binary content is sent base64-encoded." + contentChange,
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"path": schema.StringAttribute{Required: true, Description: "Absolute path in the guest."},
				"content": schema.StringAttribute{Optional: true, Sensitive: true, Description: "Text content. Exactly one of " +
					"`content` and `content_base64`. Sensitive: files often hold secrets, so plans do not show it."},
				"content_base64": schema.StringAttribute{Optional: true, Sensitive: true, Description: "Content as standard " +
					"base64, for binary files. Sensitive, like `content`."},
				"permissions": schema.StringAttribute{Optional: true, Description: "Octal mode such as `0644`."},
				"owner":       schema.StringAttribute{Optional: true, Description: "`user:group`; a file owned by the login user is written after the user exists."},
				"append": schema.BoolAttribute{Optional: true, Description: "Append to the file instead of overwriting " +
					"it. Default `false` (overwrite)."},
			}},
		},
		"shared_folders": schema.ListNestedAttribute{
			Optional: true,
			Description: "Host folders shared with `kohaku_vm.shared_folder` that the guest mounts before " +
				"any of your code runs: from cloud-init's `bootcmd` on every boot (network stage), which " +
				"comes before `write_files`, users, the shell-script parts of your user data and `runcmd`, " +
				"and through `/etc/fstab` entries with `nofail`. 9p mounts use " +
				"`trans=virtio,version=9p2000.L`." + contentChange,
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"driver": schema.StringAttribute{Optional: true, Description: "How the guest mounts the folder: `9p` " +
					"(default) or `virtiofs`, as the VM exports it (`kohaku_vm.shared_folder`'s `driver`).",
					Validators: []validator.String{stringvalidator.OneOf(string(seed.Mount9P), string(seed.MountVirtioFS))}},
				"type": schema.StringAttribute{Optional: true, Description: "The former name of `driver`: " +
					"`9p` or `virtiofs`. Set one of the two.",
					DeprecationMessage: "Use driver, the name kohaku_vm's shared_folder uses for the same setting; " +
						"type will be removed in the next major version. Renaming it changes nothing in the guest.",
					Validators: []validator.String{
						stringvalidator.OneOf(string(seed.Mount9P), string(seed.MountVirtioFS)),
						stringvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("driver")),
					}},
				"tag":  schema.StringAttribute{Required: true, Description: "Mount tag the VM exports, e.g. `kohaku_shared`."},
				"path": schema.StringAttribute{Required: true, Description: "Mount point in the guest, e.g. `/shared`."},
				"read_only": schema.BoolAttribute{Optional: true, Description: "Mount read-only in the guest. Default `false` " +
					"(read-write, as far as the VM's `shared_folder` allows)."},
				"readonly": schema.BoolAttribute{Optional: true, Description: "The former name of `read_only`. " +
					"Set one of the two.",
					DeprecationMessage: "Use read_only, the name kohaku_vm's shared_folder uses for the same setting; " +
						"readonly will be removed in the next major version. Renaming it changes nothing in the guest.",
					Validators: []validator.Bool{boolvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("read_only"))}},
				"msize": schema.Int64Attribute{Optional: true, Description: "9p message size in bytes. The default asks for " +
					"524288; the virtio transport limits it to 512000, so that is what the guest uses."},
			}},
		},
		"nvidia_driver": schema.SingleNestedAttribute{
			Optional: true,
			Description: "Install the NVIDIA driver in the guest from NVIDIA's `.run` installer with " +
				"`--silent --dkms` (build tools and kernel headers first), before anything else in runcmd " +
				"that needs the GPU. Pass `kohaku_gpu_binding.<name>.nvidia_driver_version` to install the " +
				"host's version. With the first-boot reporter, the guest's report checks that `nvidia-smi` " +
				"then reports this version (a failed download or install does not stop cloud-init): a guest " +
				"without it is a configuration mismatch, a warning or a failed create as the VM's " +
				"`on_config_mismatch` says." + contentChange,
			Attributes: map[string]schema.Attribute{
				"version": schema.StringAttribute{Required: true, Description: "Driver version, e.g. `550.54.14`."},
				"url_template": schema.StringAttribute{Optional: true, Description: "Download URL with `{version}` placeholders, for mirrors. " +
					"Default NVIDIA's download site. Must be `https://` (the guest fetches the installer over https " +
					"only, redirects included, into a private temporary file), or plain `http://` together with " +
					"`sha256`, which pins what the guest runs."},
				"sha256": schema.StringAttribute{Optional: true, Description: "Expected SHA-256 of the installer, 64 hex digits. " +
					"When set, the guest checks the download against it before running it; without it the " +
					"installer is trusted as https delivers it."},
			},
		},
		"guest_agent": schema.BoolAttribute{
			Optional: true, Computed: true,
			Default:     booldefault.StaticBool(true),
			Description: "Enable and start qemu-guest-agent in the guest. Default `true`." + contentChange,
		},
	}
}

// seedNetworkAttributes are the guest's network configuration, your own user data, and how the guest reports in.
func seedNetworkAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"network": schema.ListNestedAttribute{
			Optional: true,
			Description: "Structured network configuration, one entry per NIC, each matched by MAC address " +
				"(netplan v2 for NoCloud, `network_data.json` for ConfigDrive), accepted by cloud-init 22.4 " +
				"(Debian 12) and current releases. Conflicts with `network_config`." + contentChange,
			Validators: []validator.List{listvalidator.ConflictsWith(path.MatchRoot("network_config"))},
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"id": schema.StringAttribute{Optional: true, Description: "netplan ethernets key. Default `nic<index>`."},
				"mac": schema.StringAttribute{Optional: true, Description: "MAC address to match. " +
					"Default: derived from the seed's name: `52:54:00` plus three bytes of SHA3-224(name) " +
					"for the first NIC, of `<name>/<index>` for the others. The MACs " +
					"in use are exported in `macs`."},
				"set_name": schema.StringAttribute{Optional: true, Description: "Rename the interface, e.g. `eth0`."},
				"dhcp4":    schema.BoolAttribute{Optional: true, Description: "Use DHCPv4 on this NIC. Default `false`."},
				"dhcp6":    schema.BoolAttribute{Optional: true, Description: "Use DHCPv6 on this NIC. Default `false`."},
				"addresses": schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: "Static addresses in CIDR " +
					"notation, IPv4 or IPv6, e.g. `[\"10.0.2.15/24\", \"2001:db8::5/64\"]`."},
				"gateway4": schema.StringAttribute{Optional: true, Description: "IPv4 default gateway; must " +
					"lie in one of this NIC's IPv4 subnets. Written so that ifupdown, netplan and networkd " +
					"all apply it without net-tools (see \"How `network` reaches the guest\")."},
				"gateway6":       schema.StringAttribute{Optional: true, Description: "IPv6 default gateway; must lie in one of this NIC's IPv6 subnets (or be link-local)."},
				"nameservers":    schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: "DNS servers."},
				"search_domains": schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: "DNS search domains."},
			}},
		},
		"network_config": schema.StringAttribute{
			Optional:    true,
			Description: "Raw network configuration used verbatim instead of `network`: netplan-style YAML (v1 or v2) for NoCloud, `network_data.json` for ConfigDrive." + contentChange,
		},
		"user_data": schema.StringAttribute{
			Optional: true, Sensitive: true,
			Description: "Your own user data as text (`#cloud-config`, a script, MIME multipart, ...). " +
				"Carried byte for byte; when Kohaku also generates cloud-config the two are combined as " +
				"MIME parts with a merge type that appends lists, so your `runcmd` and `write_files` add to " +
				"Kohaku's. It must be a format cloud-init acts on: `#cloud-config`, a `#!` script, MIME " +
				"multipart, `#include`, `#include-once`, `#cloud-boothook`, `#part-handler`, " +
				"`#cloud-config-archive`, a `## template: jinja` header, or any of these gzip-compressed; " +
				"anything else (`hello world`, YAML without the `#cloud-config` line, the obsolete " +
				"`#upstart-job`) cloud-init would ignore, so it is refused at plan. Exactly one of " +
				"`user_data`, `user_data_base64`, `user_data_wo` may be set." + contentChange,
		},
		"user_data_base64": schema.StringAttribute{
			Optional: true, Sensitive: true,
			Description: "Your own user data as standard base64, possibly gzip-compressed: for example the " +
				"`rendered` output of the `cloudinit_config` data source with its defaults. The decoded " +
				"data must be one of the formats `user_data` accepts." + contentChange,
		},
		"user_data_wo": schema.StringAttribute{
			Optional: true, Sensitive: true, WriteOnly: true,
			Description: "Write-only user data (Terraform 1.11 and later): like `user_data`, but never " +
				"stored in plan or state, so secrets in it stay out of state. Checked at plan like " +
				"`user_data` when its value is known then. The seed still notices a change, because the " +
				"checksum of the rendered ISO is compared on every plan; `user_data_sha256` is left null.",
		},
		"phone_home": schema.BoolAttribute{
			Optional: true, Computed: true,
			Default: booldefault.StaticBool(false),
			Description: "Make the guest phone home over HTTP when cloud-init has finished: the first-boot " +
				"reporter (see `phone_home_reporter`) posts its report to `<provider " +
				"phone_home.base_url>/v1/phone-home/<token>`, where the token is an unguessable secret of " +
				"this seed, and `kohaku_vm` with `wait_for = \"phone_home\"` waits for that call during " +
				"create. Needs the provider's `phone_home` block and a network path from the guest to it; " +
				"`report_channel` needs neither and is what `wait_for = \"auto\"` prefers. Default `false`." +
				" Because the token is made at create, the checksum and documents of a new phone-home seed are known only after apply." + contentChange,
		},
		"phone_home_reporter": schema.BoolAttribute{
			Optional: true, Computed: true,
			Default: booldefault.StaticBool(true),
			Description: "How the guest phones home. `true` (default): Kohaku's first-boot reporter, a " +
				"small python3 script run by a systemd unit after cloud-init's last stage, posts a JSON " +
				"report with cloud-init's own status and errors, SSH host keys, addresses and GPUs (and " +
				"writes it to the VM's report channel as well), so `kohaku_vm` can fail on cloud-init " +
				"errors. `false`: cloud-init's `phone_home` module posts instance id, hostname and host " +
				"keys; it fires even when earlier modules failed, so errors go unnoticed." + contentChange,
		},
		"report_channel": schema.BoolAttribute{
			Optional: true, Computed: true,
			Default: booldefault.StaticBool(true),
			Description: "Install Kohaku's first-boot reporter (a small python3 script run by a systemd " +
				"unit after cloud-init's last stage; every cloud-init image has python3) and have it write " +
				"its report, with cloud-init's own status and errors, SSH host keys, addresses, routes, DNS " +
				"servers and GPUs, and a check of the guest against what this seed declares (addresses on " +
				"the NIC with each MAC, default routes via the gateways, nameservers and search domains, " +
				"hostname, mounted shares; see `on_config_mismatch` of `kohaku_vm`), to the VM's " +
				"`org.kohaku.report.0` virtio-serial channel. `kohaku_vm` reads that channel over the " +
				"libvirt connection during create (`wait_for = \"channel\"`, the `auto` choice), so a VM is " +
				"ready when apply returns without any network path from the guest to Terraform. " +
				"The report carries a token derived from this seed's inputs (not a secret: only the guest's " +
				"root writes the channel), so a report from a guest booted with another seed is " +
				"ignored; with `phone_home` it carries the phone-home token. Default `true`; `false` " +
				"for images without python3 or systemd." + contentChange,
		},
		"heartbeat_interval": schema.Int64Attribute{
			Optional: true, Computed: true,
			Default:    int64default.StaticInt64(seed.DefaultHeartbeatSeconds),
			Validators: []validator.Int64{int64validator.Between(0, seed.MaxHeartbeatSeconds)},
			Description: "Seconds between heartbeats of the guest's health agent, read with the " +
				"`kohaku_vm_health` data source. With `report_channel`, the reporter stays after its " +
				"first-boot report as a small agent (the same python3 script under systemd, restarted if it " +
				"fails, on every boot) that writes a heartbeat line (load, memory, disk, uptime, " +
				"cloud-init's state, each GPU's utilization, memory, temperature and power from " +
				"`nvidia-smi`) to the report channel at once when a reader opens the channel and then every " +
				"interval while it stays; while nobody reads, nothing is written and the guest does no work " +
				"beyond a check each second. `0` turns the agent off (the reporter exits after its report). " +
				"Default `10`, at most `3600`." + contentChange,
		},
		"phone_home_url": schema.StringAttribute{
			Computed: true, Sensitive: true,
			Description: "The URL the guest phones home to (it holds the seed's secret token); null without `phone_home`. It is kept across updates of the seed.",
		},
		"vendor_data": schema.StringAttribute{
			Optional: true, Sensitive: true,
			Description: "Raw vendor data." + contentChange,
		},
	}
}

// seedResultAttributes are what the seed's volume and rendered documents turned out to be.
func seedResultAttributes(keep []planmodifier.String) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"volume_key":  schema.StringAttribute{Computed: true, Description: "libvirt's key of the seed volume.", PlanModifiers: keep},
		"volume_path": schema.StringAttribute{Computed: true, Description: "Path of the seed volume on the host.", PlanModifiers: keep},
		"size_bytes":  schema.Int64Attribute{Computed: true, Description: "Size of the ISO in bytes."},
		"sha256": schema.StringAttribute{Computed: true, Description: "SHA-256 of the ISO. Read " +
			"compares it with the volume on the host: a volume changed out of band shows up as an update " +
			"that uploads the right content again. A refresh reads the volume after the ISO's 32 KiB system " +
			"area (which no ISO 9660 reader uses, and Kohaku writes zero), about 24 KiB of a typical 56 KiB " +
			"seed, so a change confined to the system area, invisible to the guest, is not seen."},
		"macs": schema.ListAttribute{
			Computed: true, ElementType: types.StringType,
			Description: "MAC address of each structured `network` entry, in order. `kohaku_vm` reads them from the seed itself, so a VM needs only `seed_id`.",
		},
		"rendered_meta_data": schema.StringAttribute{Computed: true, Description: "The meta-data document (`meta_data.json` for ConfigDrive)."},
		"user_data_sha256": schema.StringAttribute{
			Computed: true,
			Description: "SHA-256 (lower-case hex) of the user-data document as written into the ISO: the " +
				"generated cloud-config, your own user data, and Kohaku's first-boot reporter when the seed " +
				"installs it, combined as `user_data` describes. It changes whenever the user data does. The " +
				"document itself is not kept in state (the reporter alone is about 11 KB of every seed); " +
				"read it from the seed volume (see \"Reading the documents\"). Null when the seed has no user " +
				"data, and when it holds write-only values (`user_data_wo`, or a `password_hash_wo` of `user` " +
				"or `users`).",
		},
		"rendered_network_config": schema.StringAttribute{Computed: true, Description: "The network configuration document, null when there is none."},
		"rendered_vendor_data":    schema.StringAttribute{Computed: true, Sensitive: true, Description: "The vendor data document, null when there is none."},
	}
}

func (r *seedResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		configValidatorAtMostOneOf(path.MatchRoot("user_data"), path.MatchRoot("user_data_base64"), path.MatchRoot("user_data_wo")),
	}
}

// ValidateConfig renders the seed from the configuration when it is fully
// known, so bad input fails at plan time with the attribute at fault.
func (r *seedResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	if !req.Config.Raw.IsFullyKnown() {
		return
	}
	var m seedResourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, diags := m.spec(&m, placeholderPhoneHomeURL)
	resp.Diagnostics.Append(diags...)
	if diags.HasError() {
		return
	}
	if err := seed.Validate(spec); err != nil {
		if !m.UserDataWO.IsNull() { // spec carries it as UserData
			for _, ve := range seed.ValidationErrors(err) {
				if ve.Path.String() == "user_data" {
					ve.Path = validation.Root("user_data_wo")
				}
			}
		}
		addSeedErrors(&resp.Diagnostics, err)
	}
}

// ModifyPlan renders the seed at plan time so the plan shows the checksum,
// instance id, MACs and documents that apply will upload, and an unchanged
// configuration plans no change.
func (r *seedResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || !req.Config.Raw.IsFullyKnown() {
		return // destroy, or inputs known only after apply
	}
	var cfg, plan seedResourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var state *seedResourceModel
	if !req.State.Raw.IsNull() {
		state = &seedResourceModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
	}
	phURL := ""
	if cfg.PhoneHome.ValueBool() {
		if r.data != nil && r.data.phoneHome == nil {
			resp.Diagnostics.AddAttributeError(path.Root("phone_home"), "Phone home needs the provider's phone_home block",
				"phone_home = true bakes the provider's phone-home URL into the seed, but the provider has no "+
					"phone_home block. Add one, for example:\n\nprovider \"kohaku\" {\n  phone_home = {\n"+
					"    listen_address = \"127.0.0.1:8787\"\n    base_url       = \"http://10.0.2.2:8787\"\n"+
					"  }\n}")
			return
		}
		if state == nil || state.PhoneHomeURL.ValueString() == "" {
			// A new token is made at apply: what depends on it is unknown.
			plan.PhoneHomeURL = types.StringUnknown()
			resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
			return
		}
		phURL = state.PhoneHomeURL.ValueString()
	}
	spec, diags := cfg.spec(&cfg, phURL)
	resp.Diagnostics.Append(diags...)
	if diags.HasError() {
		return
	}
	res, err := seed.Render(spec)
	if err != nil {
		addSeedErrors(&resp.Diagnostics, err)
		return
	}
	for _, w := range res.Warnings {
		resp.Diagnostics.AddWarning("Seed "+cfg.Name.ValueString(), w)
	}
	warnNoAutoWait(&cfg, state, &resp.Diagnostics)
	if keepWrittenSeed(ctx, req, state, res.ISOSHA256, &cfg) {
		resp.Diagnostics.Append(resp.Plan.Set(ctx, state)...)
		return
	}
	plan.setRendered(res, writeOnlyIn(&cfg))
	plan.PhoneHomeURL = nullIfNone(phURL)
	if state != nil && state.SHA256.Equal(plan.SHA256) {
		// Nothing to upload: keep what the host reported.
		plan.VolumeKey, plan.VolumePath = state.VolumeKey, state.VolumePath
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// keepWrittenSeed is true when the seed's inputs are what they were when it
// was written, the host still has that ISO, and only this provider version's
// rendering differs (a newer version renders the same inputs differently):
// then the plan keeps the seed as it is. A change of any input, or an ISO
// changed on the host, plans the new rendering. Seeds with write-only values
// always follow the rendering: their inputs are not in state to compare.
func keepWrittenSeed(ctx context.Context, req resource.ModifyPlanRequest, state *seedResourceModel, rendered string, cfg *seedResourceModel) bool {
	if state == nil || state.SHA256.ValueString() == rendered || writeOnlyIn(cfg) || !req.Plan.Raw.Equal(req.State.Raw) {
		return false
	}
	w, ok := writtenSeed(ctx, req.Private)
	if !ok || w.SHA256 != state.SHA256.ValueString() {
		return false
	}
	tflog.Info(ctx, "seed inputs unchanged and the host has the ISO this seed wrote; keeping it although this provider version renders it differently",
		map[string]any{"name": state.Name.ValueString(), "sha256": w.SHA256, "rendered_now": rendered})
	return true
}

// warnNoAutoWait says at plan what wait_for = "auto" on a VM will wait for
// when that is nothing: a seed with neither the first-boot reporter nor
// phone home gives kohaku_vm no report, so "auto" resolves to "none" and
// create returns as soon as the domain runs. It warns when the seed is
// planned for creation or when either setting changes, not on every plan.
func warnNoAutoWait(cfg, state *seedResourceModel, diags *diag.Diagnostics) {
	reports := func(m *seedResourceModel) bool {
		return m.ReportChannel.IsNull() || m.ReportChannel.ValueBool() || m.PhoneHome.ValueBool()
	}
	if reports(cfg) || (state != nil && !reports(state)) {
		return
	}
	diags.AddAttributeWarning(path.Root("report_channel"), "VMs using this seed will not wait for the guest",
		fmt.Sprintf("Seed %s has no first-boot reporter (report_channel = false) and does not phone home, so "+
			"a kohaku_vm using it with wait_for = \"auto\" (the default) waits for nothing: create returns "+
			"as soon as the domain runs, before cloud-init has finished. To wait, set wait_for = "+
			"\"guest_agent\" on the VM (the image needs qemu-guest-agent), or report_channel = true on the "+
			"seed (the image needs python3 and systemd).", cfg.Name.ValueString()))
}

func (r *seedResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan, cfg seedResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client(plan.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	res := r.upload(ctx, c, &plan, &cfg, &resp.Diagnostics)
	if res == nil {
		return
	}
	recordWrittenSeed(ctx, resp.Private, res.ISOSHA256, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// upload renders the seed and stores it as plan's volume, filling the
// computed attributes. It returns nil after adding a diagnostic.
func (r *seedResource) upload(ctx context.Context, c hosts.Host, plan, cfg *seedResourceModel, diags *diag.Diagnostics) *seed.Result {
	phURL := ""
	if plan.PhoneHome.ValueBool() {
		if plan.PhoneHomeURL.IsUnknown() || plan.PhoneHomeURL.ValueString() == "" {
			if r.data.phoneHome == nil {
				diags.AddAttributeError(path.Root("phone_home"), "Phone home needs the provider's phone_home block", "Add a phone_home block to the provider.")
				return nil
			}
			token, err := phonehome.NewToken()
			if err != nil {
				diags.AddError("Making the phone-home token", err.Error())
				return nil
			}
			plan.PhoneHomeURL = types.StringValue(r.data.phoneHome.URL(token))
		}
		phURL = plan.PhoneHomeURL.ValueString()
	} else {
		plan.PhoneHomeURL = types.StringNull()
	}
	spec, d := plan.spec(cfg, phURL)
	diags.Append(d...)
	if d.HasError() {
		return nil
	}
	res, err := seed.Render(spec)
	if err != nil {
		addSeedErrors(diags, err)
		return nil
	}
	pool, name := plan.Pool.ValueString(), plan.Name.ValueString()
	tflog.Debug(ctx, "uploading seed", map[string]any{"pool": pool, "name": name, "bytes": len(res.ISO), "sha256": res.ISOSHA256})
	vol, err := seedlife.Store(ctx, c, pool, name, res.ISO)
	if err != nil {
		addError(diags, fmt.Sprintf("Storing seed %s/%s", pool, name), err)
		return nil
	}
	plan.ID = types.StringValue(pool + "/" + name)
	plan.VolumeKey = types.StringValue(vol.Key)
	plan.VolumePath = types.StringValue(vol.Path)
	plan.setRendered(res, writeOnlyIn(cfg))
	return res
}

func (r *seedResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state seedResourceModel
	c := r.data.modelClient(ctx, req.State, &state, &state.Host, &resp.Diagnostics)
	if c == nil {
		return
	}
	importing := state.Format.IsNull() || state.InstanceID.IsNull()
	written := state.SHA256.ValueString() // before this refresh: what the last apply wrote
	if gone := readSeed(ctx, c, &state, &resp.Diagnostics); gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if resp.Diagnostics.HasError() {
		return
	}
	if _, ok := writtenSeed(ctx, req.Private); !ok {
		// A seed written by a version that recorded nothing (or imported):
		// what it last wrote is its checksum before this refresh, or, on
		// import, what the host has.
		if importing || written == "" {
			written = state.SHA256.ValueString()
		}
		recordWrittenSeed(ctx, resp.Private, written, &resp.Diagnostics)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// readSeed refreshes m from its volume, as Read and the list resource do;
// a seed whose inputs are unknown (imported, or listed) learns what the
// ISO itself holds. gone is true when the volume is missing.
func readSeed(ctx context.Context, c hosts.Host, m *seedResourceModel, diags *diag.Diagnostics) (gone bool) {
	pool, name := m.Pool.ValueString(), m.Name.ValueString()
	// An import reads the volume whole, to learn what it holds.
	importing := m.Format.IsNull() || m.InstanceID.IsNull()
	got, err := seedlife.ReadBack(ctx, c, pool, name, importing)
	if errors.Is(err, seedlife.ErrGone) {
		tflog.Info(ctx, "seed volume is gone; removing it from state so the next apply recreates it", map[string]any{"pool": pool, "name": name})
		return true
	}
	if err != nil {
		addError(diags, fmt.Sprintf("Reading seed %s/%s", pool, name), err)
		return false
	}
	m.ID = types.StringValue(pool + "/" + name)
	m.VolumeKey = types.StringValue(got.Key)
	m.VolumePath = types.StringValue(got.Path)
	m.SHA256 = types.StringValue(got.SHA256)
	m.SizeBytes = types.Int64Value(got.SizeBytes)
	if importing {
		// Imported: learn what can be learnt from the ISO itself.
		if in, err := got.Inspection, got.InspectErr; err == nil {
			m.Format = types.StringValue(string(in.Format))
			m.InstanceID = types.StringValue(in.InstanceID)
			m.MACs = stringList(in.MACs)
			m.RenderedMetaData = types.StringValue(string(in.Files[metaDataFile(in.Format)]))
			m.RenderedNetworkConfig = nullIfNone(string(in.Files[networkFile(in.Format)]))
			m.UserDataSHA256 = digestIfAny(in.Files[userDataFile(in.Format)])
			m.RenderedVendorData = nullIfNone(string(in.Files[vendorDataFile(in.Format)]))
			m.GuestAgent = types.BoolValue(true)
			m.PhoneHome = types.BoolValue(in.PhoneHomeURL != "")
			m.PhoneHomeURL = nullIfNone(in.PhoneHomeURL)
			// Without phone home the setting is moot: report its default.
			m.PhoneHomeAgent = types.BoolValue(in.PhoneHomeURL == "" || strings.Contains(string(in.Files[userDataFile(in.Format)]), seed.ReporterScriptPath))
			m.ReportChannel = types.BoolValue(in.ReportToken != "")
			m.Heartbeat = types.Int64Value(int64(in.HeartbeatSeconds))
		} else {
			diags.AddWarning("Volume is not a seed Kohaku can read", fmt.Sprintf("%s/%s: %v", pool, name, err))
		}
	}
	m.dropEmptyDocuments()
	return false
}

func (r *seedResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state, cfg seedResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client(plan.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	if plan.SHA256.Equal(state.SHA256) && !plan.SHA256.IsUnknown() {
		plan.ID, plan.VolumeKey, plan.VolumePath = state.ID, state.VolumeKey, state.VolumePath
		resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
		return
	}
	// Content changed: replace the volume's content under the same name.
	pool, name := state.Pool.ValueString(), state.Name.ValueString()
	if err := seedlife.Delete(ctx, c, pool, name); err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Replacing the content of seed %s/%s", pool, name), err)
		return
	}
	res := r.upload(ctx, c, &plan, &cfg, &resp.Diagnostics)
	if res == nil {
		// The old content is gone and the new one did not land: drop the
		// resource so the next apply creates it, rather than keep a lie.
		resp.State.RemoveResource(ctx)
		return
	}
	recordWrittenSeed(ctx, resp.Private, res.ISOSHA256, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *seedResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state seedResourceModel
	c := r.data.modelClient(ctx, req.State, &state, &state.Host, &resp.Diagnostics)
	if c == nil {
		return
	}
	pool, name := state.Pool.ValueString(), state.Name.ValueString()
	if err := seedlife.Delete(ctx, c, pool, name); err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Deleting seed %s/%s", pool, name), err)
	}
}

// ImportState takes `<pool>/<volume>` or `<host>/<pool>/<volume>`.
func (r *seedResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importVolume(ctx, req, resp, "a seed", "default/web-1-seed.iso")
}

// accountAttributes are the attributes of an account, in user and users.
func accountAttributes(example, sudo string) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"name":          schema.StringAttribute{Required: true, Description: "Account name, e.g. `" + example + "`."},
		"sudo":          schema.StringAttribute{Optional: true, Description: sudo},
		"shell":         schema.StringAttribute{Optional: true, Description: "Login shell. Default `/bin/bash`."},
		"lock_password": schema.BoolAttribute{Optional: true, Description: "Lock the password so only keys log in. Default `true`, or `false` when a password hash is given."},
		"groups":        schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: "Supplementary groups (created when missing)."},
		"ssh_authorized_keys": schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: "OpenSSH public keys allowed " +
			"to log in as this account, one per entry, as a line of `authorized_keys` (an options prefix and a " +
			"comment are allowed). Anything else (a private key, an RFC 4716 key, two keys in one entry) is " +
			"refused at plan."},
		"password_hash":    passwordHashAttribute(),
		"password_hash_wo": passwordHashWOAttribute(),
	}
}

// withAttributes adds more to attrs.
func withAttributes(attrs, more map[string]schema.Attribute) map[string]schema.Attribute {
	for k, v := range more {
		attrs[k] = v
	}
	return attrs
}

func passwordHashAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true, Sensitive: true,
		Description: "crypt(3) hash of the account's password, as `mkpasswd --method=SHA-512` or `openssl " +
			"passwd -6` prints it (`$6$...`; also `$5$`, `$y$` yescrypt, `$2b$` bcrypt), set even when the " +
			"image already has the account (cloud-init `hashed_passwd`). Unlocks the password unless " +
			"`lock_password = true`. A plain password is refused at plan. Kept in state: use `password_hash_wo` " +
			"to keep it out. Conflicts with `password_hash_wo`.",
		Validators: []validator.String{stringvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("password_hash_wo"))},
	}
}

func passwordHashWOAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true, Sensitive: true, WriteOnly: true,
		Description: "Write-only `password_hash` (Terraform 1.11 and later): never stored in plan or state, so " +
			"the seed's `user_data_sha256` is left null. A change is still noticed, because the checksum of " +
			"the rendered ISO is compared on every plan.",
	}
}
