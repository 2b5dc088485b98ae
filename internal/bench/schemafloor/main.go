// Command schemafloor is the same-schema floor of the end-to-end benchmark:
// a provider with Kohaku's exact provider, resource and data source schemas
// (attributes, nested objects, defaults, validators and attribute plan
// modifiers, as the framework runs them) and no work of its own: no libvirt
// connection, no rendering, no readiness wait. Create and
// Update store the plan with every value not known yet set to null; Read
// returns the state as it is; Delete does nothing.
//
// Timed against the real provider on the same configuration, it separates
// what the plugin framework and the plugin protocol cost for these schemas
// from what Kohaku's own code costs. The harness (internal/bench/e2e) builds
// it and serves it under Kohaku's address with dev_overrides.
package main

import (
	"context"
	"log"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts/libvirthost"
	kohaku "github.com/kohaku/terraform-provider-kohaku/internal/provider"
)

func main() {
	if os.Getenv("TF_LOG") == "" && os.Getenv("TF_LOG_PROVIDER") == "" {
		for _, k := range []string{"TF_LOG_SDK", "TF_LOG_PROVIDER_KOHAKU"} {
			if _, set := os.LookupEnv(k); !set {
				os.Setenv(k, "OFF")
			}
		}
	}
	err := providerserver.Serve(context.Background(), func() provider.Provider {
		return &floorProvider{real: kohaku.New("schemafloor", libvirthost.Connect)()}
	}, providerserver.ServeOpts{Address: "registry.terraform.io/kohaku/kohaku"})
	if err != nil {
		log.Print(err.Error())
	}
}

// floorProvider has the real provider's schemas and nothing else.
type floorProvider struct {
	real provider.Provider
}

func (p *floorProvider) Metadata(ctx context.Context, req provider.MetadataRequest, resp *provider.MetadataResponse) {
	p.real.Metadata(ctx, req, resp)
}

func (p *floorProvider) Schema(ctx context.Context, req provider.SchemaRequest, resp *provider.SchemaResponse) {
	p.real.Schema(ctx, req, resp)
}

// Configure reads nothing: the floor talks to no host.
func (p *floorProvider) Configure(context.Context, provider.ConfigureRequest, *provider.ConfigureResponse) {
}

func (p *floorProvider) Resources(ctx context.Context) []func() resource.Resource {
	var out []func() resource.Resource
	for _, f := range p.real.Resources(ctx) {
		out = append(out, func() resource.Resource { return &floorResource{real: f()} })
	}
	return out
}

// DataSources are left out: the benchmark's configuration reads none.
func (p *floorProvider) DataSources(context.Context) []func() datasource.DataSource {
	return nil
}

// floorResource has a real resource's type name and schema.
type floorResource struct {
	real resource.Resource
}

func (r *floorResource) Metadata(ctx context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	r.real.Metadata(ctx, req, resp)
}

func (r *floorResource) Schema(ctx context.Context, req resource.SchemaRequest, resp *resource.SchemaResponse) {
	r.real.Schema(ctx, req, resp)
}

func (r *floorResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	resp.State.Raw = known(req.Plan.Raw)
}

func (r *floorResource) Read(context.Context, resource.ReadRequest, *resource.ReadResponse) {}

func (r *floorResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	resp.State.Raw = known(req.Plan.Raw)
}

func (r *floorResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}

// known is v with every unknown value (the computed attributes Kohaku would
// fill in) set to null, as state must be wholly known.
func known(v tftypes.Value) tftypes.Value {
	out, err := tftypes.Transform(v, func(_ *tftypes.AttributePath, v tftypes.Value) (tftypes.Value, error) {
		if !v.IsKnown() {
			return tftypes.NewValue(v.Type(), nil), nil
		}
		return v, nil
	})
	if err != nil {
		panic(err) // the transform cannot fail
	}
	return out
}
