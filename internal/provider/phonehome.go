package provider

import (
	"fmt"
	"net"
	"net/url"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// DefaultPhoneHomeListen is where the provider listens for guests when the
// phone_home block sets no listen_address.
const DefaultPhoneHomeListen = "127.0.0.1:8787"

type phoneHomeModel struct {
	ListenAddress types.String `tfsdk:"listen_address"`
	BaseURL       types.String `tfsdk:"base_url"`
}

func phoneHomeSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		Description: "Where the provider listens for guests phoning home, and the URL guests use to reach it. " +
			"Seeds with `phone_home = true` bake `<base_url>/v1/phone-home/<token>` into their user data (the token is an unguessable per-seed secret); `kohaku_vm` then waits for that call during create. " +
			"The listener starts once per provider process, only when a VM waits. Use a fixed port: a seed made in one run is waited for in another.",
		Attributes: map[string]schema.Attribute{
			"listen_address": schema.StringAttribute{
				Optional:    true,
				Description: "TCP address to listen on, e.g. `0.0.0.0:8787` for guests on a bridge. Default `127.0.0.1:8787`, which guests on QEMU user-mode networking reach as `10.0.2.2:8787`.",
			},
			"base_url": schema.StringAttribute{
				Optional: true,
				Description: "URL guests use to reach the listener, without a path, e.g. `http://10.0.2.2:8787` " +
					"(user-mode networking) or `http://192.168.122.1:8787` (libvirt's default NAT network). " +
					"Default: `http://` plus `listen_address`, which must then be an address guests can dial.",
			},
		},
	}
}

// phoneHome is the resolved phone-home setting of one provider configuration.
type phoneHome struct {
	listen  string
	baseURL string
}

// resolvePhoneHome checks the block and fills in defaults; nil means absent.
func resolvePhoneHome(m *phoneHomeModel) (*phoneHome, error) {
	if m == nil {
		return nil, nil
	}
	ph := &phoneHome{listen: orDefaultString(m.ListenAddress.ValueString(), DefaultPhoneHomeListen), baseURL: m.BaseURL.ValueString()}
	host, port, err := net.SplitHostPort(ph.listen)
	if err != nil || port == "" || port == "0" {
		return nil, fmt.Errorf("phone_home.listen_address %q must be host:port with a fixed port, e.g. \"0.0.0.0:8787\"", ph.listen)
	}
	if ph.baseURL == "" {
		ip := net.ParseIP(host)
		if host == "" || (ip != nil && ip.IsUnspecified()) {
			return nil, fmt.Errorf("phone_home.listen_address %q listens on every address, so Kohaku cannot "+
				"tell which one guests reach: set phone_home.base_url, e.g. \"http://192.168.122.1:%s\"", ph.listen, port)
		}
		ph.baseURL = "http://" + net.JoinHostPort(host, port)
	}
	u, err := url.Parse(ph.baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("phone_home.base_url %q must be an http(s) URL without a path, e.g. \"http://10.0.2.2:8787\"", ph.baseURL)
	}
	return ph, nil
}

// URL is the phone-home URL for a seed's token.
func (ph *phoneHome) URL(token string) string {
	return phonehome.URL(ph.baseURL, token)
}

// The listener is per process, shared by every provider configuration that
// listens on the same address: Terraform may configure the provider more
// than once per run (and tests do so many times in one process).
var (
	phoneHomeMu      sync.Mutex
	phoneHomeServers = map[string]*phonehome.Server{}
)

// server returns the process's listener for this setting; it starts
// listening on first Register.
func (ph *phoneHome) server() *phonehome.Server {
	phoneHomeMu.Lock()
	defer phoneHomeMu.Unlock()
	if s, ok := phoneHomeServers[ph.listen]; ok {
		return s
	}
	s := phonehome.NewServer(phonehome.Config{ListenAddr: ph.listen, BaseURL: ph.baseURL})
	phoneHomeServers[ph.listen] = s
	return s
}
