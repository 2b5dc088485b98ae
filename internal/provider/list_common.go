package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
)

// What every list resource's List starts with: its configuration, the host
// it names, and the stream's end when either fails.

// listHostAttribute is the host argument of every list resource.
var listHostAttribute = schema.StringAttribute{
	Optional:    true,
	Description: "The key of the provider's `hosts` map to list. Default: the provider's own host.",
}

// listConfig reads a list's configuration into cfg and connects to the
// host it names (host points into cfg). The connection is nil after the
// stream was given the diagnostics; otherwise the diagnostics are what
// reading the configuration said, for listFailed.
func listConfig(ctx context.Context, data *providerData, req list.ListRequest, stream *list.ListResultsStream, cfg any, host *types.String) (hosts.Host, diag.Diagnostics) {
	var diags diag.Diagnostics
	diags.Append(req.Config.Get(ctx, cfg)...)
	c := data.client(host.ValueString(), &diags)
	if diags.HasError() {
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return nil, diags
	}
	return c, diags
}

// listFailed ends a list with the error of a read it needed.
func listFailed(stream *list.ListResultsStream, diags diag.Diagnostics, summary string, err error) {
	addError(&diags, summary, err)
	stream.Results = list.ListResultsStreamDiagnostics(diags)
}

// listedHost is the host attribute of a list's results: null for the
// provider's default host.
func listedHost(configured types.String) types.String {
	if configured.ValueString() != "" {
		return configured
	}
	return types.StringNull()
}
