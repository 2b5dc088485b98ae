package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// durationValidator accepts a positive Go duration such as "90s" or "2m".
type durationValidator struct{}

var _ validator.String = durationValidator{}

func (durationValidator) Description(context.Context) string {
	return "a positive Go duration such as \"30s\", \"2m\" or \"1h30m\""
}

func (v durationValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (durationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	d, err := time.ParseDuration(req.ConfigValue.ValueString())
	if err != nil || d <= 0 {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration",
			fmt.Sprintf("%q is not a positive duration. Write it as a Go duration, for example \"30s\", \"2m\" or \"1h30m\".", req.ConfigValue.ValueString()))
	}
}
