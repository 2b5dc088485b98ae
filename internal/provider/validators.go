package provider

// Every custom validator of the provider's schemas lives here; the
// declarative ones come from terraform-plugin-framework-validators.

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/kohaku/terraform-provider-kohaku/internal/image"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// durationValidator accepts a Go duration of at least min; min 0 allows
// "0s", a positive min asks for a positive duration.
type durationValidator struct{ min time.Duration }

// positiveDuration accepts "90s" or "2m", not "0s".
var positiveDuration = durationValidator{min: time.Nanosecond}

// nonNegativeDuration accepts "0s" and more.
var nonNegativeDuration = durationValidator{min: 0}

var _ validator.String = durationValidator{}

// what says what the validator accepts, and how to write it.
func (v durationValidator) what() (string, string) {
	switch v.min {
	case 0:
		return "a duration of zero or more", `"0s", "30s" or "2m"`
	case time.Nanosecond:
		return "a positive duration", `"30s", "2m" or "1h30m"`
	}
	return "a duration of at least " + v.min.String(), fmt.Sprintf("%q or \"2m\"", v.min.String())
}

func (v durationValidator) Description(context.Context) string {
	_, examples := v.what()
	switch v.min {
	case 0:
		return "a Go duration of zero or more, such as " + examples
	case time.Nanosecond:
		return "a positive Go duration such as " + examples
	}
	return "a Go duration of at least " + v.min.String() + ", such as " + examples
}

func (v durationValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v durationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	d, err := time.ParseDuration(req.ConfigValue.ValueString())
	if err != nil || d < v.min {
		what, examples := v.what()
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration",
			fmt.Sprintf("%q is not %s. Write it as a Go duration, for example %s.", req.ConfigValue.ValueString(), what, examples))
	}
}

// checkedString is a string validator made of a function that says what
// is wrong with a value (nil when nothing is): its error is the
// diagnostic's detail, under summary.
type checkedString struct {
	desc, summary string
	check         func(string) error
}

var _ validator.String = checkedString{}

func (v checkedString) Description(context.Context) string { return v.desc }

func (v checkedString) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v checkedString) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, v.summary, sentence(err))
	}
}

// volumeIDValidator accepts "<pool>/<volume>".
type volumeIDValidator struct{ what string }

var _ validator.String = volumeIDValidator{}

func (v volumeIDValidator) Description(context.Context) string {
	return v.what + " of the form <pool>/<volume>, for example \"default/web-1-seed.iso\""
}

func (v volumeIDValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v volumeIDValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, _, ok := parseVolumeID(req.ConfigValue.ValueString()); !ok {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(),
			fmt.Sprintf("%q is not %s of the form <pool>/<volume>. Use the id of the kohaku_seed resource, for "+
				"example seed_id = kohaku_seed.web.id (which looks like \"default/web-1-seed.iso\").", req.ConfigValue.ValueString(), v.what))
	}
}

// pciAddressValidator accepts DDDD:BB:SS.F.
type pciAddressValidator struct{}

var _ validator.String = pciAddressValidator{}

func (pciAddressValidator) Description(context.Context) string {
	return "a PCI address DDDD:BB:SS.F in lower-case hex, such as 0000:01:00.0"
}

func (v pciAddressValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (pciAddressValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	a, err := vfio.ParseAddress(s)
	if err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid PCI address", err.Error()+". lspci -D on the host prints the addresses; the kohaku_pci_devices data source lists them too.")
		return
	}
	if a.String() != s {
		// One spelling per device, so ids, imports and kohaku_vm agree.
		resp.Diagnostics.AddAttributeError(req.Path, "PCI address not in canonical form",
			fmt.Sprintf("Write %q as %q (lower-case hex, as lspci -D prints it).", s, a.String()))
	}
}

// signingKeysValidator accepts ASCII-armored OpenPGP public keys.
type signingKeysValidator struct{}

var _ validator.String = signingKeysValidator{}

func (signingKeysValidator) Description(context.Context) string {
	return "one or more ASCII-armored OpenPGP public keys (-----BEGIN PGP PUBLIC KEY BLOCK-----)"
}

func (v signingKeysValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (signingKeysValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := image.ParseSigningKeys(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid signing keys",
			"The checksum signing keys cannot be read: "+err.Error()+". Give the vendor's public keys as "+
				"published (ASCII armor), e.g. file(\"debian-cloud-signing-key.asc\").")
	}
}
